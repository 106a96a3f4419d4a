SELECT
  APPROX_QUANTILES(DATETIME_DIFF(rx.stoptime, rx.starttime, HOUR) / 24.0, 100)[OFFSET(75)] AS duration_days_p75
FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
  ON p.subject_id = rx.subject_id
WHERE p.gender = 'F'
  AND p.anchor_age BETWEEN 53 AND 63
  AND EXISTS (
    SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
    WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
  )
  AND LOWER(rx.drug) LIKE '%vancomycin%'
  AND rx.stoptime > rx.starttime;
