WITH cohort AS (
  SELECT DISTINCT a.hadm_id
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
    ON a.hadm_id = d.hadm_id
  WHERE p.gender = 'M'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 67 AND 77
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.insurance IN ('Medicare')
    )
    AND ((d.icd_version = 9 AND (d.icd_code LIKE '491%' OR d.icd_code LIKE '492%' OR d.icd_code LIKE '496%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'J44%')))
),
initial AS (
  SELECT
    le.hadm_id, le.valuenum, le.ref_range_lower, le.ref_range_upper,
    ROW_NUMBER() OVER (PARTITION BY le.hadm_id ORDER BY le.charttime) AS rn
  FROM cohort AS c
  JOIN `physionet-data.mimiciv_3_1_hosp.labevents` AS le
    ON c.hadm_id = le.hadm_id
  WHERE le.itemid = 50960
    AND le.valuenum IS NOT NULL
)
SELECT
  CASE
    WHEN valuenum < ref_range_lower THEN 'Below reference range'
    WHEN valuenum > ref_range_upper THEN 'Above reference range'
    ELSE 'Within reference range'
  END AS category,
  COUNT(*) AS num_admissions,
  ROUND(100 * COUNT(*) / SUM(COUNT(*)) OVER (), 2) AS pct_admissions
FROM initial
WHERE rn = 1
GROUP BY category
ORDER BY category;
