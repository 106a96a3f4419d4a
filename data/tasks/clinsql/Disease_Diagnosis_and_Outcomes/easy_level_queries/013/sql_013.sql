SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET(75)] AS los_days_p75
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
  ON p.subject_id = a.subject_id
JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
  ON a.hadm_id = d.hadm_id
WHERE p.gender = 'F'
  AND p.anchor_age BETWEEN 62 AND 72
  AND EXISTS (
    SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
    WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
  )
  AND d.seq_num <= 3
  AND ((d.icd_version = 9 AND (d.icd_code LIKE '491%' OR d.icd_code LIKE '492%' OR d.icd_code LIKE '496%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'J44%')));
