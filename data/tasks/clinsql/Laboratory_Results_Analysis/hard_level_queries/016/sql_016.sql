WITH cohort AS (
  SELECT DISTINCT a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
    ON a.hadm_id = d.hadm_id
  WHERE p.gender = 'F'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 80 AND 90
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
    )
    AND ((d.icd_version = 9 AND (d.icd_code LIKE '42731%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'I48%')))
),
instability AS (
  SELECT
    c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag,
    COUNTIF(le.flag = 'abnormal') AS abnormal_results
  FROM cohort AS c
  LEFT JOIN `physionet-data.mimiciv_3_1_hosp.labevents` AS le
    ON c.hadm_id = le.hadm_id
    AND le.charttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL 72 HOUR)
  GROUP BY c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag
),
ranked AS (
  SELECT *, NTILE(4) OVER (ORDER BY abnormal_results, hadm_id) AS quartile
  FROM instability
)
SELECT
  IF(quartile = 4, 'top quartile', 'lower three quartiles') AS instability_group,
  COUNT(*) AS num_admissions,
  ROUND(AVG(abnormal_results), 2) AS mean_abnormal_results,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days
FROM ranked
GROUP BY instability_group
ORDER BY instability_group;
