SELECT department_id, COUNT(*) AS headcount, AVG(salary) AS avg_salary, MAX(salary) - MIN(salary) AS spread
FROM employees
WHERE hired_on BETWEEN '2015-01-01' AND '2020-12-31'
GROUP BY department_id
HAVING COUNT(*) > 5 AND AVG(salary) >= 50000.00
ORDER BY avg_salary DESC
