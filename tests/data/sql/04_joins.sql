SELECT o.id, c.name, p.title, oi.quantity * oi.unit_price AS line_total
FROM orders o
INNER JOIN customers c ON c.id = o.customer_id
LEFT OUTER JOIN order_items oi ON oi.order_id = o.id
LEFT JOIN products p ON p.id = oi.product_id AND p.archived = FALSE
WHERE o.created_at >= '2024-01-01'
ORDER BY o.id;
