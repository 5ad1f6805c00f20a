-- Code: programming documents (our own filter in the style of the published ones).
-- FDC primary 005.1x (programming) or 005.4x (systems programming and operating systems);
-- reference, code or forum documents (type v1 3, 4, 5) of the kinds that teach or answer
-- (type v2 8 Documentation, 9 FAQ, 10 Knowledge Article, 18 Q&A Forum, 23 Tutorial);
-- at least Mostly Correct (technical correctness codes 3-5).
SELECT *
FROM corpus
WHERE (starts_with(eai_taxonomy.free_decimal_correspondence.primary.code, '005.1')
       OR starts_with(eai_taxonomy.free_decimal_correspondence.primary.code, '005.4'))
  AND eai_taxonomy.document_type_v1.primary.code IN ('3', '4', '5')
  AND eai_taxonomy.document_type_v2.primary.code IN ('8', '9', '10', '18', '23')
  AND eai_taxonomy.technical_correctness.primary.code IN ('3', '4', '5')
