WITH cohort AS (
  SELECT
    a.hadm_id,
    DATETIME_DIFF(a.dischtime, a.admittime, HOUR) / 24.0 AS los_days,
    CASE
      WHEN a.hospital_expire_flag = 1 THEN 'In-hospital death'
      WHEN a.discharge_location IN ('HOME', 'HOME HEALTH CARE') THEN 'Home'
      ELSE 'Facility or other'
    END AS disposition
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  WHERE p.gender = 'F'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 77 AND 87
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_location IN ('EMERGENCY ROOM')
    )
    AND a.insurance = 'Medicare'
)
SELECT
  disposition,
  COUNT(*) AS num_admissions,
  ROUND(AVG(los_days), 2) AS mean_los_days,
  APPROX_QUANTILES(los_days, 4)[OFFSET(2)] AS median_los_days,
  ROUND(100 * COUNTIF(los_days <= 10) / COUNT(*), 2) AS pct_los_le_10_days
FROM cohort
GROUP BY disposition
ORDER BY disposition;
