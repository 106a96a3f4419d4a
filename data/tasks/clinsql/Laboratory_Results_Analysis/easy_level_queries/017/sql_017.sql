WITH first_labs AS (
  SELECT
    le.hadm_id,
    le.valuenum,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.labevents` AS le
    ON p.subject_id = le.subject_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 44 AND 54
    AND le.itemid = 51222
    AND le.valuenum IS NOT NULL
    AND le.hadm_id IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET(75)] AS first_hemoglobin_p75
FROM first_labs
WHERE rn = 1;
