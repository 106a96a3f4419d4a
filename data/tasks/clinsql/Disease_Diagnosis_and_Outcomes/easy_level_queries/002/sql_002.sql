SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET(25)] AS los_days_p25
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
  ON p.subject_id = a.subject_id
JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
  ON a.hadm_id = d.hadm_id
WHERE p.gender = 'F'
  AND p.anchor_age BETWEEN 44 AND 54
  AND d.seq_num <= 3
  AND ((d.icd_version = 9 AND (d.icd_code LIKE '410%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'I21%')));
