WITH first_values AS (
  SELECT
    ce.stay_id,
    ce.valuenum,
    ROW_NUMBER() OVER (PARTITION BY ce.stay_id ORDER BY ce.charttime) AS rn
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  JOIN `physionet-data.mimiciv_3_1_icu.chartevents` AS ce
    ON i.stay_id = ce.stay_id
  WHERE p.gender = 'F'
    AND p.anchor_age BETWEEN 45 AND 55
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
    )
    AND ce.itemid = 220210
    AND ce.valuenum IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET(50)] AS first_value_median
FROM first_values
WHERE rn = 1;
