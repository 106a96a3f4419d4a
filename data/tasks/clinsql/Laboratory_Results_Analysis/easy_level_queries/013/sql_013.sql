WITH first_labs AS (
  SELECT
    le.hadm_id,
    le.valuenum,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.labevents` AS le
    ON p.subject_id = le.subject_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 70 AND 80
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_location IN ('EMERGENCY ROOM')
    )
    AND le.itemid = 50960
    AND le.valuenum IS NOT NULL
    AND le.hadm_id IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET(25)] AS first_magnesium_p25
FROM first_labs
WHERE rn = 1;
