select distinct country, city
from customers
where country <> 'US' and city is not null
order by country asc, city desc
limit 20 offset 40;
