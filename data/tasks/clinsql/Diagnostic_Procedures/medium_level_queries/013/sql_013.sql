WITH stays AS (
  SELECT i.stay_id, i.first_careunit
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 75 AND 85
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
    )
),
events AS (
  SELECT
    s.stay_id, s.first_careunit,
    COUNT(pe.itemid) AS num_events,
    SUM(DATETIME_DIFF(pe.endtime, pe.starttime, MINUTE)) / 60.0 AS hours_total
  FROM stays AS s
  LEFT JOIN `physionet-data.mimiciv_3_1_icu.procedureevents` AS pe
    ON s.stay_id = pe.stay_id
    AND pe.itemid = 225459
  GROUP BY s.stay_id, s.first_careunit
)
SELECT
  IF(first_careunit LIKE '%Surgical%' OR first_careunit LIKE '%SICU%', 'surgical ICU', 'medical or cardiac ICU')
    AS unit_type,
  COUNT(*) AS num_stays,
  ROUND(100 * COUNTIF(num_events > 0) / COUNT(*), 2) AS pct_with_procedure,
  ROUND(AVG(num_events), 2) AS mean_events_per_stay
FROM events
GROUP BY unit_type
ORDER BY unit_type;
