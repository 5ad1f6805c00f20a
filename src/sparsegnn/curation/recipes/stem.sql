-- STEM, after Essential-Web's published STEM filter.
-- Both FDC codes (primary and secondary; a missing secondary counts as the primary) must
-- sit in the science/technology divisions 50-59, 60, 61, 62, 66 or in 00 (computing).
-- Then one branch per field, each with its own document types:
--   code (FDC 005.1x, 005.4x), medical (61x), engineering (62x), everything else.
-- The per-branch document-type lists are ours (the published ones are not restated here).
-- Finally a reasoning-depth check on codes 2-5 (Basic..Exceptional).
WITH t AS (
    SELECT *,
        eai_taxonomy.free_decimal_correspondence.primary.code AS _fdc1,
        coalesce(eai_taxonomy.free_decimal_correspondence.secondary.code,
                 eai_taxonomy.free_decimal_correspondence.primary.code) AS _fdc2,
        eai_taxonomy.document_type_v1.primary.code AS _dt1,
        eai_taxonomy.document_type_v2.primary.code AS _dt2
    FROM corpus
)
SELECT * EXCLUDE (_fdc1, _fdc2, _dt1, _dt2)
FROM t
WHERE left(_fdc1, 2) IN ('50', '51', '52', '53', '54', '55', '56', '57', '58', '59',
                         '60', '61', '62', '66', '00')
  AND left(_fdc2, 2) IN ('50', '51', '52', '53', '54', '55', '56', '57', '58', '59',
                         '60', '61', '62', '66', '00')
  AND CASE
      WHEN starts_with(_fdc1, '005.1') OR starts_with(_fdc1, '005.4')
          THEN _dt1 IN ('3', '4', '5') AND _dt2 IN ('8', '9', '10', '18', '23')
      WHEN left(_fdc1, 2) = '61'
          THEN _dt1 IN ('2', '3') AND _dt2 IN ('3', '8', '10', '18')
      WHEN left(_fdc1, 2) = '62'
          THEN _dt1 IN ('2', '3', '4') AND _dt2 IN ('3', '8', '10', '15', '23')
      ELSE _dt1 IN ('2', '3') AND _dt2 IN ('3', '9', '10', '15', '18', '23')
      END
  AND eai_taxonomy.reasoning_depth.primary.code IN ('2', '3', '4', '5')
