/* report: top authors
   by number of published posts */
Select a.Name, Count(DISTINCT p.id) As posts  -- distinct posts only
From authors a Join posts p On p.author_id = a.id
Where p.published = true Or (p.featured = true And p.views > 1e3)
Group By a.Name
Order By posts Desc
Limit 10
