WITH stays AS (
  SELECT
    i.stay_id, i.hadm_id, i.intime, i.los, a.hospital_expire_flag,
    EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
      WHERE d.hadm_id = i.hadm_id AND ((d.icd_version = 9 AND (d.icd_code LIKE '585%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'N18%')))
    ) AS has_condition
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON i.hadm_id = a.hadm_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 55 AND 65
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
    )
),
counts AS (
  SELECT
    s.stay_id, s.los, s.hospital_expire_flag, s.has_condition,
    COUNT(pe.itemid) AS procedures_72h
  FROM stays AS s
  LEFT JOIN `physionet-data.mimiciv_3_1_icu.procedureevents` AS pe
    ON s.stay_id = pe.stay_id
    AND pe.starttime BETWEEN s.intime AND DATETIME_ADD(s.intime, INTERVAL 72 HOUR)
  GROUP BY s.stay_id, s.los, s.hospital_expire_flag, s.has_condition
)
SELECT
  IF(has_condition, 'chronic kidney disease', 'other ICU patients') AS cohort,
  COUNT(*) AS num_stays,
  APPROX_QUANTILES(procedures_72h, 100)[OFFSET(50)] AS procedures_72h_p50,
  ROUND(AVG(los), 2) AS mean_icu_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM counts
GROUP BY cohort
ORDER BY cohort;
