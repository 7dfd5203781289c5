(SELECT user_id FROM logins WHERE day = '2024-05-01')
INTERSECT
(SELECT user_id FROM purchases WHERE amount > 0)
EXCEPT
SELECT user_id FROM employees
