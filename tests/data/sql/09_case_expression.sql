SELECT order_id,
       CASE
           WHEN total >= 1000 THEN 'large'
           WHEN total >= 100 THEN 'medium'
           ELSE 'small'
       END AS size_class,
       CASE status WHEN 'P' THEN 'pending' WHEN 'S' THEN 'shipped' END AS status_name,
       CAST(total AS DECIMAL(10, 2)) AS total_rounded
FROM orders;
