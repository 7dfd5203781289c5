SELECT d.name,
       (SELECT COUNT(*) FROM employees e WHERE e.department_id = d.id) AS staff
FROM departments d
WHERE d.id IN (
    SELECT e.department_id
    FROM employees e
    WHERE e.salary > (SELECT AVG(salary) FROM employees)
    GROUP BY e.department_id
    HAVING COUNT(*) >= 2
)
ORDER BY staff DESC, d.name;
