SELECT id, email FROM customers WHERE newsletter = TRUE
UNION
SELECT id, email FROM leads WHERE opted_in = 1
UNION ALL
SELECT NULL, 'admin@example.com'
ORDER BY email
LIMIT 100;
