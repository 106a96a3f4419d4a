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
    AND p.anchor_age BETWEEN 56 AND 66
    AND EXISTS (
      SELECT 1 FROM `physionet-data.mimiciv_3_1_hosp.admissions` AS ra
      WHERE ra.subject_id = p.subject_id AND ra.admission_type IN ('EW EMER.', 'DIRECT EMER.')
    )
    AND ((pr.icd_version = 9 AND (pr.icd_code LIKE '39%' OR pr.icd_code LIKE '55%' OR pr.icd_code LIKE '56%' OR pr.icd_code LIKE '57%')) OR (pr.icd_version = 10 AND (pr.icd_code LIKE '0T%' OR pr.icd_code LIKE '5A1D%')))
  GROUP BY pr.hadm_id
) AS per_admission;
