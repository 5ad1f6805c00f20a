-- Mathematics, after Essential-Web's published math filter.
-- FDC primary code in 51x (Mathematics); document types that carry worked mathematics;
-- reasoning depth Basic..Exceptional (codes 2-5, compared as codes, never as labels);
-- technical correctness Highly or Exceptionally Correct.
SELECT *
FROM corpus
WHERE starts_with(eai_taxonomy.free_decimal_correspondence.primary.code, '51')
  AND eai_taxonomy.document_type_v1.primary.code IN ('3', '4', '5', '9')
  AND eai_taxonomy.document_type_v2.primary.code
      IN ('5', '8', '9', '10', '15', '16', '18', '20', '23')
  AND eai_taxonomy.reasoning_depth.primary.code IN ('2', '3', '4', '5')
  AND eai_taxonomy.technical_correctness.primary.code IN ('4', '5')
