SELECT u.id, u.first_name AS name, u.email contact, 'active' AS status
FROM users AS u
WHERE u.deleted_at IS NULL
