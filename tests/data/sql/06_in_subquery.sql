SELECT name, price
FROM products
WHERE category_id IN (SELECT id FROM categories WHERE parent_id = 3)
  AND supplier_id NOT IN (7, 11, 13)
  AND name LIKE 'Pro%'
  AND sku NOT LIKE '%\_old' ESCAPE '\'
