WITH admissions_aged AS (
  SELECT
    a.subject_id, a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    ROW_NUMBER() OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS admission_order,
    LEAD(a.admittime) OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS next_admittime
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  WHERE p.gender = 'M'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 53 AND 63
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_location IN ('EMERGENCY ROOM')
    )
),
flagged AS (
  SELECT
    x.*,
    EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
      WHERE d.hadm_id = x.hadm_id AND ((d.icd_version = 9 AND (d.icd_code LIKE '585%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'N18%')))
    ) AS has_condition
  FROM admissions_aged AS x
  WHERE x.admission_order = 1
)
SELECT
  IF(has_condition, 'chronic kidney disease', 'all other index admissions') AS cohort,
  COUNT(*) AS num_patients,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(100 * COUNTIF(next_admittime IS NOT NULL AND DATETIME_DIFF(next_admittime, dischtime, DAY) <= 30) / COUNT(*), 2)
    AS readmission_30d_pct
FROM flagged
GROUP BY cohort
ORDER BY cohort;
