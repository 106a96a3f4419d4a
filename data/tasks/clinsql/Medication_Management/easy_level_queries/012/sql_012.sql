SELECT
  APPROX_QUANTILES(DATETIME_DIFF(rx.stoptime, rx.starttime, HOUR) / 24.0, 100)[OFFSET(75)] AS duration_days_p75
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
  ON p.subject_id = rx.subject_id
WHERE p.gender = 'M'
  AND p.anchor_age BETWEEN 42 AND 52
  AND LOWER(rx.drug) LIKE '%lisinopril%'
  AND rx.stoptime > rx.starttime;
