-- Medical, after Essential-Web's published medical filter.
-- One FDC code (primary or secondary; a missing secondary counts as the primary) is in
-- 61x (Medicine) and the other in 50, 51, 54, 57, 58, 59 or 61; the document is
-- academic or reference (type v1 2, 3) or academic writing, documentation, knowledge
-- article or Q&A (type v2 3, 8, 10, 18). Our blocklist then drops promotional, adult and
-- machine-generated documents (v1 6, 8, 10) and product pages, spam and truncated text
-- (v2 17, 19, 22).
WITH t AS (
    SELECT *,
        left(eai_taxonomy.free_decimal_correspondence.primary.code, 2) AS _p,
        left(coalesce(eai_taxonomy.free_decimal_correspondence.secondary.code,
                      eai_taxonomy.free_decimal_correspondence.primary.code), 2) AS _s,
        eai_taxonomy.document_type_v1.primary.code AS _dt1,
        eai_taxonomy.document_type_v2.primary.code AS _dt2
    FROM corpus
)
SELECT * EXCLUDE (_p, _s, _dt1, _dt2)
FROM t
WHERE ((_p = '61' AND _s IN ('50', '51', '54', '57', '58', '59', '61'))
       OR (_s = '61' AND _p IN ('50', '51', '54', '57', '58', '59', '61')))
  AND (_dt1 IN ('2', '3') OR _dt2 IN ('3', '8', '10', '18'))
  AND _dt1 NOT IN ('6', '8', '10')
  AND _dt2 NOT IN ('17', '19', '22')
