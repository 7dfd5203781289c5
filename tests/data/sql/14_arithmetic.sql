SELECT -price AS neg, price * (1 - discount / 100.0) AS net, quantity % 12 AS loose,
       .5 * width * height AS half_area, ROUND(weight / 2.2046, 3) AS kg,
       COALESCE(nickname, first_name, 'n/a') AS display_name, "select" AS quoted_keyword
FROM items
WHERE NOT (price < 0 OR quantity = 0) AND width != height
