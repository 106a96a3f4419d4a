WITH cohort AS (
  SELECT
    a.hadm_id, a.admittime,
    EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
      WHERE d.hadm_id = a.hadm_id AND ((d.icd_version = 9 AND (d.icd_code LIKE '480%' OR d.icd_code LIKE '481%' OR d.icd_code LIKE '482%' OR d.icd_code LIKE '483%' OR d.icd_code LIKE '484%' OR d.icd_code LIKE '485%' OR d.icd_code LIKE '486%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'J12%' OR d.icd_code LIKE 'J13%' OR d.icd_code LIKE 'J14%' OR d.icd_code LIKE 'J15%' OR d.icd_code LIKE 'J16%' OR d.icd_code LIKE 'J17%' OR d.icd_code LIKE 'J18%')))
    ) AS has_condition
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  WHERE p.gender = 'M'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 56 AND 66
),
exposure AS (
  SELECT
    c.hadm_id, c.has_condition,
    COUNTIF(rx.starttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL 24 HOUR)) > 0 AS exposed
  FROM cohort AS c
  LEFT JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
    ON c.hadm_id = rx.hadm_id
    AND LOWER(rx.drug) LIKE '%vancomycin%'
  GROUP BY c.hadm_id, c.has_condition
)
SELECT
  IF(has_condition, 'with pneumonia', 'without pneumonia') AS cohort,
  COUNT(*) AS num_admissions,
  ROUND(100 * COUNTIF(exposed) / COUNT(*), 2) AS pct_with_drug
FROM exposure
GROUP BY cohort
ORDER BY cohort;
