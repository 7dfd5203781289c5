-- customers that ordered something in the last month
SELECT c.id, c.name
FROM customers c
WHERE EXISTS (
    SELECT 1
    FROM orders o
    WHERE o.customer_id = c.id
      AND o.created_at > '2024-04-01'
)
AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.customer_id = c.id);
