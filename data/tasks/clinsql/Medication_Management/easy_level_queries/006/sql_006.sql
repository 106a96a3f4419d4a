SELECT
  APPROX_QUANTILES(DATETIME_DIFF(rx.stoptime, rx.starttime, HOUR) / 24.0, 100)[OFFSET(25)] AS duration_days_p25
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
  ON p.subject_id = rx.subject_id
WHERE p.gender = 'M'
  AND p.anchor_age BETWEEN 54 AND 64
  AND EXISTS (
    SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
    WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
  )
  AND LOWER(rx.drug) LIKE '%lisinopril%'
  AND rx.stoptime > rx.starttime;
