"""SQL-verifier fidelity on ordinary correct rewrites of gold queries and on near misses.

Each gold query (over a shop schema with ties, NULLs and duplicate values, in two data variants so a
literal answer cannot pass) comes with queries a model might write that a careful grader accepts --
aliases, joins for subqueries, EXISTS, CTEs, DISTINCT vs GROUP BY, COUNT(1) vs COUNT(*), BETWEEN vs
two comparisons, IN lists vs OR, CASE vs IIF, ORDER BY with an extra tie-breaking key or by position
or alias, LIMIT picking another row of a cut tie group, float arithmetic in another order -- and
near misses it must reject (another filter bound, a missing DISTINCT, COUNT(col) over NULLs, LEFT vs
INNER JOIN, NOT IN over a NULL, the other sort direction, LIMIT without ORDER BY, an extra or missing
column, integer division). Every completion is put in an ordinary reply (fences of both kinds, prose).

    PYTHONPATH=src python bench/sql_fidelity.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict

from rlvr.data.types import Task
from rlvr.verifiers.sql import SqlVerifier

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, joined TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT, category TEXT, price REAL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, qty INTEGER, day TEXT);
INSERT INTO customers VALUES {customers};
INSERT INTO products VALUES {products};
INSERT INTO orders VALUES {orders};
"""
VARIANTS = [
    dict(customers="(1,'Ann','Oslo','2020-01-05'),(2,'Bo','Rome','2021-03-10'),(3,'Cy','Oslo','2021-03-10'),"
                   "(4,'Di',NULL,'2022-07-01'),(5,'Ed','Rome','2019-11-30'),(6,'Flo','Lima','2022-07-01')",
         products="(1,'pen','office',1.5),(2,'ink','office',7.25),(3,'desk','furniture',120.0),"
                  "(4,'lamp','furniture',35.0),(5,'mug','kitchen',7.25),(6,'tea',NULL,3.1)",
         orders="(1,1,1,10,'2023-01-02'),(2,1,3,1,'2023-01-02'),(3,2,2,3,'2023-02-11'),(4,3,5,2,'2023-02-11'),"
                "(5,3,1,5,'2023-03-01'),(6,5,4,1,'2023-03-15'),(7,2,5,4,'2023-03-15'),(8,1,2,3,'2023-04-20'),"
                "(9,NULL,6,2,'2023-04-21')"),
    dict(customers="(1,'Ann','Rome','2021-02-02'),(2,'Bo','Rome','2020-06-06'),(3,'Cy','Lima','2020-06-06'),"
                   "(4,'Di','Oslo','2023-01-01'),(5,'Ed',NULL,'2018-08-08'),(6,'Flo','Oslo','2019-09-09'),"
                   "(7,'Gus','Lima','2022-02-02')",
         products="(1,'pen','office',2.0),(2,'ink','office',2.0),(3,'desk','furniture',99.9),"
                  "(4,'lamp','furniture',99.9),(5,'mug','kitchen',4.5),(6,'tea','kitchen',4.5),(7,'box',NULL,0.75)",
         orders="(1,2,1,4,'2023-05-01'),(2,2,3,1,'2023-05-01'),(3,3,4,2,'2023-05-02'),(4,4,5,6,'2023-05-03'),"
                "(5,6,6,6,'2023-05-03'),(6,6,1,1,'2023-05-04'),(7,7,7,3,'2023-05-05'),(8,1,2,2,'2023-05-05'),"
                "(9,NULL,5,1,'2023-05-06'),(10,3,3,2,'2023-05-06')"),
]

# gold, [correct rewrites], [near misses]
TABLE: list[tuple[str, str, list[str], list[str]]] = [
    ("filter", "SELECT name FROM customers WHERE city = 'Oslo'",
     ["SELECT c.name FROM customers AS c WHERE c.city = 'Oslo'", "select name from customers where city='Oslo';",
      "SELECT name AS customer_name FROM customers WHERE city IN ('Oslo')", "SELECT name FROM customers WHERE 'Oslo' = city",
      "SELECT name FROM customers WHERE city = 'Oslo' ORDER BY name", "SELECT \"name\" FROM \"customers\" WHERE city = 'Oslo'"],
     ["SELECT name FROM customers WHERE city = 'oslo'", "SELECT name FROM customers WHERE city <> 'Oslo'",
      "SELECT name, city FROM customers WHERE city = 'Oslo'", "SELECT name FROM customers WHERE city LIKE 'O%' OR city IS NULL"]),
    ("between", "SELECT title FROM products WHERE price BETWEEN 2 AND 40",
     ["SELECT title FROM products WHERE price >= 2 AND price <= 40", "SELECT title FROM products WHERE NOT (price < 2 OR price > 40)"],
     ["SELECT title FROM products WHERE price > 2 AND price < 40", "SELECT title FROM products WHERE price BETWEEN 2 AND 30"]),
    ("in_list", "SELECT title FROM products WHERE category IN ('office', 'kitchen')",
     ["SELECT title FROM products WHERE category = 'office' OR category = 'kitchen'",
      "SELECT title FROM products WHERE category = 'office' UNION ALL SELECT title FROM products WHERE category = 'kitchen'"],
     ["SELECT title FROM products WHERE category NOT IN ('furniture') OR category IS NULL", "SELECT title FROM products WHERE category = 'office'"]),
    ("join_vs_subquery", "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders)",
     ["SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id",
      "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
      "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id",
      "WITH buyers AS (SELECT DISTINCT customer_id FROM orders) SELECT name FROM customers JOIN buyers ON buyers.customer_id = customers.id",
      "SELECT DISTINCT name FROM customers, orders WHERE orders.customer_id = customers.id"],
     ["SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id",
      "SELECT name FROM customers", "SELECT c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id"]),
    ("anti_join", "SELECT name FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
     ["SELECT c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE o.id IS NULL",
      "SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders WHERE customer_id IS NOT NULL)",
      "SELECT name FROM customers EXCEPT SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"],
     ["SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders)",
      "SELECT c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE o.customer_id IS NOT NULL"]),
    ("count", "SELECT COUNT(*) FROM orders",
     ["SELECT COUNT(1) FROM orders", "SELECT COUNT(id) FROM orders", "SELECT COUNT(*) AS n FROM orders",
      "SELECT SUM(1) FROM orders", "WITH t AS (SELECT * FROM orders) SELECT COUNT(*) FROM t"],
     ["SELECT COUNT(customer_id) FROM orders", "SELECT COUNT(DISTINCT customer_id) FROM orders", "SELECT COUNT(*) - 1 FROM orders"]),
    ("distinct", "SELECT DISTINCT city FROM customers",
     ["SELECT city FROM customers GROUP BY city", "SELECT city FROM customers UNION SELECT city FROM customers"],
     ["SELECT city FROM customers", "SELECT DISTINCT city FROM customers WHERE city IS NOT NULL"]),
    ("group", "SELECT category, COUNT(*) FROM products GROUP BY category",
     ["SELECT category, COUNT(1) AS n FROM products GROUP BY 1", "SELECT p.category, COUNT(p.id) FROM products p GROUP BY p.category",
      "SELECT category, COUNT(*) FROM products GROUP BY category ORDER BY COUNT(*) DESC"],
     ["SELECT category, COUNT(*) FROM products WHERE category IS NOT NULL GROUP BY category",
      "SELECT COUNT(*), category FROM products GROUP BY category", "SELECT category, COUNT(DISTINCT price) FROM products GROUP BY category"]),
    ("having", "SELECT customer_id FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id HAVING SUM(qty) > 4",
     ["SELECT customer_id FROM (SELECT customer_id, SUM(qty) AS total FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id) WHERE total > 4",
      "WITH t AS (SELECT customer_id, SUM(qty) s FROM orders GROUP BY customer_id) SELECT customer_id FROM t WHERE s > 4 AND customer_id IS NOT NULL"],
     ["SELECT customer_id FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id HAVING SUM(qty) >= 4",
      "SELECT customer_id FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id HAVING COUNT(*) > 4"]),
    ("aggregate_float", "SELECT AVG(price) FROM products",
     ["SELECT SUM(price) / COUNT(*) FROM products", "SELECT SUM(price) * 1.0 / COUNT(price) FROM products",
      "SELECT AVG(price) AS avg_price FROM products", "SELECT (SELECT SUM(price) FROM products) / (SELECT COUNT(*) FROM products)"],
     ["SELECT ROUND(AVG(price), 1) FROM products", "SELECT AVG(price) FROM products WHERE category IS NOT NULL",
      "SELECT CAST(AVG(price) AS INTEGER) FROM products"]),
    ("arith", "SELECT o.id, o.qty * p.price FROM orders o JOIN products p ON p.id = o.product_id",
     ["SELECT orders.id, products.price * orders.qty AS total FROM orders JOIN products ON products.id = orders.product_id",
      "SELECT o.id, o.qty * p.price * 1.0 FROM orders o INNER JOIN products p ON o.product_id = p.id"],
     ["SELECT o.id, o.qty + p.price FROM orders o JOIN products p ON p.id = o.product_id",
      "SELECT o.id, o.qty * p.price FROM orders o LEFT JOIN products p ON p.id = o.customer_id"]),
    ("case", "SELECT title, CASE WHEN price > 10 THEN 'high' ELSE 'low' END FROM products",
     ["SELECT title, IIF(price > 10, 'high', 'low') FROM products",
      "SELECT title, CASE WHEN price <= 10 THEN 'low' ELSE 'high' END AS band FROM products"],
     ["SELECT title, CASE WHEN price > 40 THEN 'high' ELSE 'low' END FROM products",
      "SELECT title, CASE WHEN price > 10 THEN 'High' ELSE 'Low' END FROM products"]),
    ("order_ties", "SELECT title, price FROM products ORDER BY price DESC",
     ["SELECT title, price FROM products ORDER BY price DESC, title", "SELECT title, price FROM products ORDER BY price DESC, id DESC",
      "SELECT title, price FROM products ORDER BY 2 DESC, 1 DESC", "SELECT title, price AS p FROM products ORDER BY p DESC, title ASC",
      "SELECT title, price FROM products ORDER BY -price", "SELECT title, price FROM products ORDER BY price DESC, category"],
     ["SELECT title, price FROM products ORDER BY price", "SELECT title, price FROM products ORDER BY title",
      "SELECT price, title FROM products ORDER BY price DESC"]),
    ("order_hidden_key", "SELECT name FROM customers ORDER BY joined",
     ["SELECT name FROM customers ORDER BY joined, name DESC", "SELECT name FROM customers ORDER BY joined ASC, id DESC",
      "SELECT c.name FROM customers c ORDER BY c.joined, c.city"],
     ["SELECT name FROM customers ORDER BY joined DESC", "SELECT name FROM customers ORDER BY name",
      "SELECT name FROM customers"]),
    ("order_two_keys", "SELECT name, city FROM customers ORDER BY city, name",
     ["SELECT name, city FROM customers ORDER BY city ASC, name ASC", "SELECT name, city FROM customers ORDER BY 2, 1",
      "SELECT name, city FROM customers ORDER BY city, name, id"],
     ["SELECT name, city FROM customers ORDER BY city, name DESC", "SELECT name, city FROM customers ORDER BY name, city",
      "SELECT name, city FROM customers ORDER BY city DESC, name"]),
    ("limit_ties", "SELECT title FROM products ORDER BY price DESC LIMIT 3",
     ["SELECT title FROM products ORDER BY price DESC, title LIMIT 3", "SELECT title FROM products ORDER BY price DESC, id DESC LIMIT 3",
      "SELECT title FROM (SELECT title, price FROM products ORDER BY price DESC, title DESC) LIMIT 3"],
     ["SELECT title FROM products ORDER BY price DESC LIMIT 4", "SELECT title FROM products ORDER BY price LIMIT 3",
      "SELECT title FROM products LIMIT 3", "SELECT title FROM products ORDER BY price DESC LIMIT 3 OFFSET 1"]),
    ("top_one", "SELECT title FROM products WHERE price = (SELECT MAX(price) FROM products)",
     ["SELECT p.title FROM products p WHERE NOT EXISTS (SELECT 1 FROM products q WHERE q.price > p.price)",
      "WITH m AS (SELECT MAX(price) AS mx FROM products) SELECT title FROM products, m WHERE price = mx"],
     ["SELECT title FROM products ORDER BY price DESC LIMIT 1", "SELECT title, MAX(price) FROM products"]),
    ("nulls", "SELECT name FROM customers WHERE city IS NULL",
     ["SELECT name FROM customers WHERE COALESCE(city, '') = ''", "SELECT name FROM customers WHERE city IS NULL ORDER BY 1"],
     ["SELECT name FROM customers WHERE city = NULL", "SELECT name FROM customers WHERE city IS NOT NULL"]),
    ("strings", "SELECT name || ' (' || city || ')' FROM customers WHERE city IS NOT NULL",
     ["SELECT printf('%s (%s)', name, city) FROM customers WHERE city IS NOT NULL",
      "SELECT c.name || ' (' || c.city || ')' AS label FROM customers c WHERE c.city IS NOT NULL"],
     ["SELECT name || '(' || city || ')' FROM customers WHERE city IS NOT NULL",
      "SELECT name || ' (' || city || ')' FROM customers"]),
    ("dates", "SELECT COUNT(*) FROM orders WHERE day >= '2023-05-03'",
     ["SELECT COUNT(*) FROM orders WHERE date(day) >= date('2023-05-03')", "SELECT COUNT(1) FROM orders WHERE day > '2023-05-02'"],
     ["SELECT COUNT(*) FROM orders WHERE day > '2023-05-03'"]),
    ("per_group_top", "SELECT category, MAX(price) FROM products WHERE category IS NOT NULL GROUP BY category ORDER BY category",
     ["SELECT p.category, (SELECT MAX(q.price) FROM products q WHERE q.category = p.category) FROM products p "
      "WHERE p.category IS NOT NULL GROUP BY p.category ORDER BY p.category",
      "SELECT category, MAX(price) AS top FROM products GROUP BY category HAVING category IS NOT NULL ORDER BY 1"],
     ["SELECT category, MIN(price) FROM products WHERE category IS NOT NULL GROUP BY category ORDER BY category",
      "SELECT category, MAX(price) FROM products GROUP BY category ORDER BY category"]),
    ("window", "SELECT name, RANK() OVER (ORDER BY joined) FROM customers",
     ["SELECT name, (SELECT COUNT(*) FROM customers d WHERE d.joined < c.joined) + 1 FROM customers c",
      "SELECT name, RANK() OVER (ORDER BY joined ASC) AS r FROM customers"],
     ["SELECT name, ROW_NUMBER() OVER (ORDER BY joined) FROM customers",
      "SELECT name, DENSE_RANK() OVER (ORDER BY joined) FROM customers"]),
    ("limit_offset_ties", "SELECT title FROM products ORDER BY price LIMIT 2 OFFSET 1",
     ["SELECT title FROM products ORDER BY price, title DESC LIMIT 2 OFFSET 1", "SELECT title FROM products ORDER BY price LIMIT 1, 2"],
     ["SELECT title FROM products ORDER BY price LIMIT 2", "SELECT title FROM products ORDER BY price DESC LIMIT 2 OFFSET 1"]),
    ("top_group", "SELECT customer_id, SUM(qty) FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id ORDER BY SUM(qty) DESC LIMIT 1",
     ["SELECT customer_id, SUM(qty) AS total FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id ORDER BY total DESC, customer_id DESC LIMIT 1",
      "SELECT customer_id, total FROM (SELECT customer_id, SUM(qty) AS total FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id) ORDER BY total DESC LIMIT 1"],
     ["SELECT customer_id, SUM(qty) FROM orders GROUP BY customer_id ORDER BY SUM(qty) LIMIT 1",
      "SELECT customer_id, COUNT(*) FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id ORDER BY COUNT(*) DESC LIMIT 1"]),
    ("self_join", "SELECT a.name, b.name FROM customers a JOIN customers b ON a.city = b.city AND a.id < b.id",
     ["SELECT x.name, y.name FROM customers x, customers y WHERE x.city = y.city AND x.id < y.id",
      "SELECT a.name, b.name FROM customers a INNER JOIN customers b ON b.city = a.city WHERE b.id > a.id"],
     ["SELECT a.name, b.name FROM customers a JOIN customers b ON a.city = b.city AND a.id <> b.id",
      "SELECT a.name, b.name FROM customers a JOIN customers b ON a.city = b.city AND a.id <= b.id"]),
    ("coalesce", "SELECT name, COALESCE(city, 'unknown') FROM customers",
     ["SELECT name, IFNULL(city, 'unknown') FROM customers", "SELECT name, CASE WHEN city IS NULL THEN 'unknown' ELSE city END FROM customers"],
     ["SELECT name, COALESCE(city, 'Unknown') FROM customers", "SELECT name, city FROM customers"]),
    ("like", "SELECT title FROM products WHERE title LIKE 'p%'",
     ["SELECT title FROM products WHERE substr(title, 1, 1) = 'p'", "SELECT title FROM products WHERE instr(title, 'p') = 1",
      "SELECT title FROM products WHERE title GLOB 'p*'"],
     ["SELECT title FROM products WHERE title LIKE '%p%'", "SELECT title FROM products WHERE title LIKE '%p'"]),
    ("exists_count", "SELECT title FROM products p WHERE EXISTS (SELECT 1 FROM orders o WHERE o.product_id = p.id AND o.qty >= 3)",
     ["SELECT title FROM products p WHERE (SELECT COUNT(*) FROM orders o WHERE o.product_id = p.id AND o.qty >= 3) > 0",
      "SELECT DISTINCT p.title FROM products p JOIN orders o ON o.product_id = p.id WHERE o.qty >= 3"],
     ["SELECT p.title FROM products p JOIN orders o ON o.product_id = p.id WHERE o.qty >= 3",
      "SELECT title FROM products p WHERE EXISTS (SELECT 1 FROM orders o WHERE o.product_id = p.id AND o.qty > 3)"]),
    ("percent", "SELECT 100.0 * SUM(qty) / (SELECT SUM(qty) FROM orders) FROM orders WHERE product_id = 1",
     ["SELECT SUM(qty) * 100.0 / (SELECT SUM(qty) FROM orders) FROM orders WHERE product_id = 1",
      "SELECT CAST(SUM(CASE WHEN product_id = 1 THEN qty ELSE 0 END) AS REAL) / SUM(qty) * 100 FROM orders"],
     ["SELECT SUM(qty) / (SELECT SUM(qty) FROM orders) FROM orders WHERE product_id = 1",
      "SELECT 100 * SUM(qty) / (SELECT SUM(qty) FROM orders) FROM orders WHERE product_id = 1"]),
    ("union", "SELECT city FROM customers WHERE city IS NOT NULL UNION SELECT category FROM products WHERE category IS NOT NULL",
     ["SELECT DISTINCT x FROM (SELECT city AS x FROM customers UNION ALL SELECT category FROM products) WHERE x IS NOT NULL"],
     ["SELECT city FROM customers WHERE city IS NOT NULL UNION ALL SELECT category FROM products WHERE category IS NOT NULL"]),
    ("int_division", "SELECT SUM(qty) * 1.0 / COUNT(*) FROM orders",
     ["SELECT AVG(qty) FROM orders", "SELECT CAST(SUM(qty) AS REAL) / COUNT(*) FROM orders"],
     ["SELECT SUM(qty) / COUNT(*) FROM orders"]),
]

REPLIES = [
    lambda q: f"```sql\n{q}\n```",
    lambda q: f"Here is the query:\n\n```sql\n{q};\n```\n\nIt returns the requested rows.",
    lambda q: f"~~~sql\n{q}\n~~~",
    lambda q: f"```\n{q}\n```",
]


def all_cases() -> list[tuple[str, str, str, str]]:
    out = []
    for cat, gold, good, bad in TABLE:
        for k, q in enumerate(good):
            out.append((cat, gold, REPLIES[k % len(REPLIES)](q), "pass"))
        for k, q in enumerate(bad):
            out.append((cat, gold, REPLIES[k % len(REPLIES)](q), "wrong"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sv = SqlVerifier(timeout_s=5.0)
    schemas = [SCHEMA.format(**v) for v in VARIANTS]
    stats: dict[str, Counter] = defaultdict(Counter)
    rows, t0 = [], time.perf_counter()
    for cat, gold, comp, want in all_cases():
        task = Task(id=cat, prompt="?", kind="sql", gold={"gold_sql": gold, "schema_sql": schemas}, answer_format="code_fence")
        v = sv.verify(task, comp)
        s = stats[cat]
        s["cases"] += 1
        s[want] += 1
        bad = (want == "pass") != (v.outcome == "pass")
        if bad:
            s["rejected" if want == "pass" else "accepted"] += 1
            print(f"[{cat}] {gold!r} vs {comp!r}: expected {want}, got {v.outcome} {v.details}")
        rows.append({"category": cat, "gold": gold, "completion": comp, "expected": want, "outcome": v.outcome})
    tot: Counter = Counter()
    for s in stats.values():
        tot.update(s)
    print(f"SQL fidelity: {tot['cases']} cases ({tot['pass']} correct, {tot['wrong']} wrong); correct rejected "
          f"{tot['rejected']}, wrong accepted {tot['accepted']}; {time.perf_counter() - t0:.1f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": {k: dict(v) for k, v in stats.items()}, "cases": rows}, f, indent=1)
    return 0 if tot["rejected"] == 0 and tot["accepted"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
