SELECT
  APPROX_QUANTILES(DATETIME_DIFF(rx.stoptime, rx.starttime, HOUR) / 24.0, 100)[OFFSET(90)] AS duration_days_p90
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
  ON p.subject_id = rx.subject_id
WHERE p.gender = 'M'
  AND p.anchor_age BETWEEN 47 AND 57
  AND EXISTS (
    SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
    WHERE ra.subject_id = p.subject_id AND ra.admission_location IN ('EMERGENCY ROOM')
  )
  AND LOWER(rx.drug) LIKE '%enoxaparin%'
  AND rx.stoptime > rx.starttime;
