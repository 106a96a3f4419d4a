WITH first_stays AS (
  SELECT
    i.subject_id, i.hadm_id, i.stay_id, i.intime, i.los,
    ROW_NUMBER() OVER (PARTITION BY i.subject_id ORDER BY i.intime) AS stay_order
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 63 AND 73
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_location IN ('EMERGENCY ROOM')
    )
),
episodes AS (
  SELECT
    s.stay_id, s.hadm_id, s.los,
    COUNTIF(ce.valuenum < 92) AS abnormal_episodes
  FROM first_stays AS s
  LEFT JOIN `physionet-data.mimiciv_3_1_icu.chartevents` AS ce
    ON s.stay_id = ce.stay_id
    AND ce.itemid = 220277
    AND ce.charttime BETWEEN s.intime AND DATETIME_ADD(s.intime, INTERVAL 24 HOUR)
  WHERE s.stay_order = 1
  GROUP BY s.stay_id, s.hadm_id, s.los
),
quartiles AS (
  SELECT e.*, a.hospital_expire_flag, NTILE(4) OVER (ORDER BY e.abnormal_episodes, e.stay_id) AS quartile
  FROM episodes AS e
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON e.hadm_id = a.hadm_id
)
SELECT
  quartile,
  COUNT(*) AS num_stays,
  ROUND(AVG(abnormal_episodes), 2) AS mean_abnormal_episodes,
  ROUND(AVG(los * 24), 1) AS mean_icu_los_hours,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM quartiles
GROUP BY quartile
ORDER BY quartile;
