WITH cohort AS (
  SELECT DISTINCT a.hadm_id, a.admittime, a.dischtime, a.hospital_expire_flag
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.admissions` AS a
    ON p.subject_id = a.subject_id
  JOIN `physionet-data.mimiciv_3_1_hosp.diagnoses_icd` AS d
    ON a.hadm_id = d.hadm_id
  WHERE p.gender = 'F'
    AND (p.anchor_age + EXTRACT(YEAR FROM a.admittime) - p.anchor_year) BETWEEN 74 AND 84
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
    )
    AND ((d.icd_version = 9 AND (d.icd_code LIKE '42731%')) OR (d.icd_version = 10 AND (d.icd_code LIKE 'I48%')))
),
scored AS (
  SELECT
    c.*, ch.charlson_comorbidity_index,
    CASE
      WHEN ch.charlson_comorbidity_index <= 3 THEN 'low (0-3)'
      WHEN ch.charlson_comorbidity_index <= 6 THEN 'medium (4-6)'
      ELSE 'high (7+)'
    END AS burden
  FROM cohort AS c
  JOIN `physionet-data.mimiciv_3_1_derived.charlson` AS ch
    ON c.hadm_id = ch.hadm_id
)
SELECT
  burden,
  COUNT(*) AS num_admissions,
  ROUND(AVG(charlson_comorbidity_index), 2) AS mean_charlson,
  ROUND(100 * AVG(hospital_expire_flag), 2) AS mortality_pct,
  ROUND(AVG(DATETIME_DIFF(dischtime, admittime, HOUR) / 24.0), 2) AS mean_los_days
FROM scored
GROUP BY burden
ORDER BY burden;
