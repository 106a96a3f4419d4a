WITH stays AS (
  SELECT
    i.stay_id, i.hadm_id, i.intime, i.los, a.hospital_expire_flag,
    EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
      WHERE d.hadm_id = i.hadm_id AND ((d.icd_version = 9 AND (d.icd_code LIKE '480%' OR d.icd_code LIKE '481%' OR d.icd_code LIKE '482%' OR d.icd_code LIKE '483%' OR d.icd_code LIKE '484%' OR d.icd_code LIKE '485%' OR d.icd_code LIKE '486%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'J12%' OR d.icd_code LIKE 'J13%' OR d.icd_code LIKE 'J14%' OR d.icd_code LIKE 'J15%' OR d.icd_code LIKE 'J16%' OR d.icd_code LIKE 'J17%' OR d.icd_code LIKE 'J18%')))
    ) AS has_condition
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_icu.icustays` AS i
    ON p.subject_id = i.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON i.hadm_id = a.hadm_id
  WHERE p.gender = 'F'
    AND p.anchor_age BETWEEN 43 AND 53
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
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
  IF(has_condition, 'pneumonia', 'other ICU patients') AS cohort,
  COUNT(*) AS num_stays,
  APPROX_QUANTILES(procedures_72h, 100)[OFFSET(90)] AS procedures_72h_p90,
  ROUND(AVG(los), 2) AS mean_icu_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM counts
GROUP BY cohort
ORDER BY cohort;
