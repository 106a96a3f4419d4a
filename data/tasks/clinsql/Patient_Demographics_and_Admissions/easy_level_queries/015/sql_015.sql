SELECT
  APPROX_QUANTILES(DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0, 100)[OFFSET(90)] AS p90_los_days
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
  ON p.subject_id = a.subject_id
WHERE p.gender = 'M'
  AND p.anchor_age BETWEEN 42 AND 52
  AND EXISTS (
    SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
    WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
  )
  AND a.admission_type IN ('ELECTIVE');
