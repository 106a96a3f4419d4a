WITH stay_means AS (
  SELECT
    i.stay_id,
    AVG(ce.valuenum) AS mean_value
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  JOIN `physionet-data.mimiciv_3_1_icu.chartevents` AS ce
    ON i.stay_id = ce.stay_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 46 AND 56
    AND ce.itemid = 220045
    AND ce.valuenum IS NOT NULL
    AND ce.charttime BETWEEN i.intime AND DATETIME_ADD(i.intime, INTERVAL 24 HOUR)
  GROUP BY i.stay_id
)
SELECT
  CASE
    WHEN mean_value < 60 THEN 'low (<60)'
    WHEN mean_value > 100 THEN 'high (>100)'
    ELSE 'normal (60-100)'
  END AS category,
  COUNT(*) AS num_stays,
  ROUND(AVG(mean_value), 2) AS mean_value,
  APPROX_QUANTILES(mean_value, 100)[OFFSET(50)] AS median_value
FROM stay_means
GROUP BY category
ORDER BY category;
