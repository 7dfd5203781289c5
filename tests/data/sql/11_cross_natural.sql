SELECT s.size, c.color, s.size || '-' || c.color AS variant
FROM sizes s
CROSS JOIN colors c
NATURAL JOIN stock
RIGHT JOIN warehouses w USING (warehouse_id)
FULL OUTER JOIN audits a ON a.variant = s.size;
