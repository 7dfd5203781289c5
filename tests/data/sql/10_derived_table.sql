SELECT t.region, t.revenue, t.revenue * 100.0 / (SELECT SUM(amount) FROM sales) AS pct
FROM (
    SELECT region, SUM(amount) AS revenue
    FROM sales
    GROUP BY region
) AS t
WHERE t.revenue > 0
ORDER BY pct DESC;
