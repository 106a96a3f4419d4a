WITH cohort AS (
  SELECT
    a.subject_id, a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag,
    LEAD(a.admittime) OVER (PARTITION BY a.subject_id ORDER BY a.admittime) AS next_admittime
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  WHERE p.gender = 'F'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 65 AND 75
),
complexity AS (
  SELECT
    c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag, c.next_admittime,
    COUNT(DISTINCT LOWER(rx.drug)) AS distinct_drugs
  FROM cohort AS c
  LEFT JOIN `physionet-data.mimiciv_3_1_hosp.prescriptions` AS rx
    ON c.hadm_id = rx.hadm_id
    AND rx.starttime BETWEEN c.admittime AND DATETIME_ADD(c.admittime, INTERVAL 48 HOUR)
  GROUP BY c.hadm_id, c.admittime, c.dischtime, c.hospital_expire_flag, c.next_admittime
),
ranked AS (
  SELECT *, NTILE(5) OVER (ORDER BY distinct_drugs, hadm_id) AS quintile
  FROM complexity
)
SELECT
  quintile,
  COUNT(*) AS num_admissions,
  ROUND(AVG(distinct_drugs), 2) AS mean_distinct_drugs,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(100 * COUNTIF(next_admittime IS NOT NULL AND DATETIME_DIFF(next_admittime, dischtime, DAY) <= 30) / COUNT(*), 2)
    AS readmission_30d_pct,
  APPROX_QUANTILES(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0, 100)[OFFSET(50)] AS median_los_days
FROM ranked
GROUP BY quintile
ORDER BY quintile;
