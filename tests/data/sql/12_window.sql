SELECT employee_id,
       department_id,
       salary,
       RANK() OVER (PARTITION BY department_id ORDER BY salary DESC) AS dept_rank,
       SUM(salary) OVER (ORDER BY employee_id) AS running_total
FROM employees
WHERE salary IS NOT NULL;
