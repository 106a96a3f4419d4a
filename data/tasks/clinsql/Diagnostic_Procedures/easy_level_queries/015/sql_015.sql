SELECT
  APPROX_QUANTILES(procedure_count, 100)[OFFSET(50)] AS procedures_median
FROM (
  SELECT
    pr.hadm_id,
    COUNT(DISTINCT pr.icd_code) AS procedure_count
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.procedures_icd` AS pr
    ON p.subject_id = pr.subject_id
  WHERE p.gender = 'F'
    AND p.anchor_age BETWEEN 67 AND 77
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
    )
    AND ((pr.icd_version = 9 AND (pr.icd_code LIKE '42%' OR pr.icd_code LIKE '43%' OR pr.icd_code LIKE '44%' OR pr.icd_code LIKE '45%' OR pr.icd_code LIKE '46%')) OR (pr.icd_version = 10 AND (pr.icd_code LIKE '0D%')))
  GROUP BY pr.hadm_id
) AS per_admission;
