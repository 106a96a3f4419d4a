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
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 62 AND 72
    AND ce.itemid = 220181
    AND ce.valuenum IS NOT NULL
)
SELECT
  APPROX_QUANTILES(valuenum, 100)[OFFSET(25)] AS first_value_p25
FROM first_values
WHERE rn = 1;
