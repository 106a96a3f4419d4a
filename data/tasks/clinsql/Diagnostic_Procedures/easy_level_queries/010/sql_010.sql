SELECT
  APPROX_QUANTILES(procedure_count, 100)[OFFSET(50)] AS procedures_median
FROM (
  SELECT
    pr.hadm_id,
    COUNT(DISTINCT pr.icd_code) AS procedure_count
  FROM `physionet-data.mimiciv_3_1_hosp.patients` AS p
  JOIN `physionet-data.mimiciv_3_1_hosp.procedures_icd` AS pr
    ON p.subject_id = pr.subject_id
  WHERE p.gender = 'M'
    AND p.anchor_age BETWEEN 53 AND 63
    AND ((pr.icd_version = 9 AND (pr.icd_code LIKE '87%' OR pr.icd_code LIKE '88%')) OR (pr.icd_version = 10 AND (pr.icd_code LIKE 'B%')))
  GROUP BY pr.hadm_id
) AS per_admission;
