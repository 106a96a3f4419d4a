WITH first_labs AS (
  SELECT
    le.hadm_id,
    le.valuenum,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.labevents` AS le
    ON p.subject_id = le.subject_id
  WHERE p.gender = 'F'
    AND p.anchor_age BETWEEN 61 AND 71
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
    )
    AND le.itemid = 51265
    AND le.valuenum IS NOT NULL
    AND le.hadm_id IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET(50)] AS first_platelet_count_median
FROM first_labs
WHERE rn = 1;
