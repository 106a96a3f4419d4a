WITH cohort AS (
  SELECT DISTINCT
    a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    EXISTS (SELECT 1 FROM `physionet-data.mimiciv_3_1_icu.icustays` AS i WHERE i.hadm_id = a.hadm_id) AS had_icu
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
    ON a.hadm_id = d.hadm_id
  WHERE p.gender = 'F'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 46 AND 56
    AND ((d.icd_version = 9 AND (d.icd_code LIKE '285%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'D64%')))
)
SELECT
  IF(had_icu, 'ICU', 'no ICU') AS icu_group,
  COUNT(*) AS num_admissions,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct
FROM cohort
GROUP BY icu_group
ORDER BY icu_group;
