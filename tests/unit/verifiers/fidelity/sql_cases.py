"""SQL fidelity cases: (category, gold query, completion, expected verdict), worked out by hand on
``SCHEMA`` (two variants: the same tables with different rows, so literals cannot pass)."""

from __future__ import annotations

SCHEMA = """
CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary REAL, boss INTEGER, age INTEGER);
CREATE TABLE dept (code TEXT PRIMARY KEY, title TEXT, floor INTEGER);
INSERT INTO dept VALUES ('eng', 'Engineering', 3), ('ops', 'Operations', 1), ('hr', 'People', 2);
INSERT INTO emp VALUES {rows};
"""
ROWS = [
    ("(1,'ada','eng',120.5,NULL,40),(2,'bob','eng',99.25,1,31),(3,'cyd','ops',80.0,1,31),(4,'dee','ops',80.0,3,NULL),"
    "(5,'eli','hr',70.1,1,25),(6,'fay','eng',99.25,2,31),(7,'gus',NULL,55.0,NULL,52)"),
    ("(1,'ada','ops',110.0,NULL,45),(2,'bob','eng',99.25,1,33),(3,'cyd','eng',99.25,1,33),(4,'dee','hr',60.0,3,28),"
    "(5,'eli','hr',60.0,1,NULL),(6,'fay','ops',75.5,2,33),(7,'gus','eng',42.0,NULL,61),(8,'hal',NULL,30.0,7,22)"),
]


def sql(q: str, mark: str = "```", tag: str = "sql") -> str:
    return f"Here is the query:\n{mark}{tag}\n{q}\n{mark}\n"


CASES: list[tuple[str, str, str, str]] = [
    # ties under an ordered gold
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp ORDER BY salary DESC, name"), "pass"),
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp ORDER BY salary DESC, name DESC"), "pass"),
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp ORDER BY salary DESC, id DESC"), "pass"),
    ("ties", "SELECT name, age FROM emp ORDER BY age", sql("SELECT name, age FROM emp ORDER BY age, name DESC"), "pass"),
    ("ties", "SELECT name, salary FROM emp ORDER BY 2 DESC", sql("SELECT name, salary AS s FROM emp ORDER BY s DESC, 1"), "pass"),
    ("ties", "SELECT dept, COUNT(*) FROM emp GROUP BY dept ORDER BY COUNT(*) DESC",
     sql("SELECT dept, COUNT(*) AS n FROM emp GROUP BY dept ORDER BY n DESC, dept DESC"), "pass"),
    ("ties", "SELECT name FROM emp ORDER BY age", sql("SELECT name FROM emp ORDER BY age, id DESC"), "pass"),
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp ORDER BY salary ASC"), "wrong"),
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp ORDER BY name"), "wrong"),
    ("ties", "SELECT name FROM emp ORDER BY salary DESC", sql("SELECT name FROM emp"), "wrong"),
    ("ties", "SELECT name FROM emp ORDER BY age", sql("SELECT name FROM emp ORDER BY age DESC"), "wrong"),
    ("ties", "SELECT name, age FROM emp ORDER BY age, name", sql("SELECT name, age FROM emp ORDER BY age, name DESC"), "wrong"),
    # LIMIT cutting a tie group
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 2", sql("SELECT name FROM emp ORDER BY salary DESC, name DESC LIMIT 2"), "pass"),
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 3", sql("SELECT name FROM emp ORDER BY salary DESC, id DESC LIMIT 3"), "pass"),
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 1", sql("SELECT name FROM emp ORDER BY salary DESC LIMIT 1"), "pass"),
    ("limit", "SELECT name FROM emp ORDER BY age DESC LIMIT 2 OFFSET 1", sql("SELECT name FROM emp ORDER BY age DESC, name LIMIT 2 OFFSET 1"), "pass"),
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 2", sql("SELECT name FROM emp ORDER BY salary DESC LIMIT 3"), "wrong"),
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 2", sql("SELECT name FROM emp ORDER BY salary LIMIT 2"), "wrong"),
    ("limit", "SELECT name FROM emp ORDER BY salary DESC LIMIT 2", sql("SELECT name FROM emp ORDER BY name DESC LIMIT 2"), "wrong"),
    # aliases, equivalent formulations
    ("equivalent", "SELECT name, salary FROM emp WHERE dept = 'eng'", sql("SELECT e.name AS who, e.salary AS pay FROM emp AS e WHERE e.dept = 'eng'"), "pass"),
    ("equivalent", "SELECT DISTINCT dept FROM emp WHERE dept IS NOT NULL", sql("SELECT dept FROM emp WHERE dept IS NOT NULL GROUP BY dept"), "pass"),
    ("equivalent", "SELECT name FROM emp WHERE dept IN (SELECT code FROM dept WHERE floor > 1)",
     sql("SELECT e.name FROM emp e JOIN dept d ON e.dept = d.code WHERE d.floor > 1"), "pass"),
    ("equivalent", "SELECT name FROM emp WHERE dept IN (SELECT code FROM dept WHERE floor > 1)",
     sql("SELECT name FROM emp e WHERE EXISTS (SELECT 1 FROM dept d WHERE d.code = e.dept AND d.floor > 1)"), "pass"),
    ("equivalent", "SELECT dept, AVG(salary) FROM emp GROUP BY dept", sql("SELECT dept, SUM(salary) / COUNT(*) FROM emp GROUP BY dept"), "pass"),
    ("equivalent", "SELECT COUNT(*) FROM emp WHERE salary > 80", sql("WITH rich AS (SELECT * FROM emp WHERE salary > 80) SELECT COUNT(*) FROM rich"), "pass"),
    ("equivalent", "SELECT name FROM emp WHERE dept = 'eng'", sql("SELECT name FROM emp WHERE dept = 'eng' ORDER BY name DESC"), "pass"),
    ("equivalent", "SELECT SUM(salary) FROM emp", sql("SELECT SUM(s) FROM (SELECT salary AS s FROM emp ORDER BY salary DESC)"), "pass"),
    ("equivalent", "SELECT COUNT(*) FROM emp", sql("SELECT COUNT(*) * 1.0 FROM emp"), "pass"),
    ("equivalent", "SELECT name, salary FROM emp", sql("SELECT salary, name FROM emp"), "wrong"),
    ("equivalent", "SELECT name FROM emp WHERE dept = 'eng'", sql("SELECT name, dept FROM emp WHERE dept = 'eng'"), "wrong"),
    ("equivalent", "SELECT COUNT(*) FROM emp", sql("SELECT COUNT(dept) FROM emp"), "wrong"),
    ("equivalent", "SELECT dept FROM emp UNION SELECT code FROM dept", sql("SELECT dept FROM emp UNION ALL SELECT code FROM dept"), "wrong"),
    ("equivalent", "SELECT name FROM emp WHERE salary > 80", sql("SELECT name FROM emp WHERE salary >= 80"), "wrong"),
    ("equivalent", "SELECT name FROM emp WHERE dept = 'eng'", sql("SELECT 'ada' UNION ALL SELECT 'bob' UNION ALL SELECT 'fay'"), "wrong"),
    # floats
    ("floats", "SELECT SUM(salary) FROM emp", sql("SELECT SUM(salary) FROM (SELECT salary FROM emp ORDER BY salary)"), "pass"),
    ("floats", "SELECT AVG(salary) FROM emp WHERE dept = 'eng'", sql("SELECT SUM(salary) * 1.0 / COUNT(*) FROM emp WHERE dept = 'eng'"), "pass"),
    ("floats", "SELECT AVG(salary) FROM emp", sql("SELECT ROUND(AVG(salary)) FROM emp"), "wrong"),
    ("floats", "SELECT AVG(age) FROM emp", sql("SELECT SUM(age) / COUNT(age) FROM emp"), "wrong"),
    ("floats", "SELECT SUM(salary) FROM emp", sql("SELECT SUM(salary) + 0.01 FROM emp"), "wrong"),
    # NULLs
    ("nulls", "SELECT name FROM emp WHERE boss IS NULL", sql("SELECT name FROM emp WHERE boss IS NULL"), "pass"),
    ("nulls", "SELECT name, dept FROM emp", sql("SELECT name, dept FROM emp"), "pass"),
    ("nulls", "SELECT name, age FROM emp ORDER BY age", sql("SELECT name, age FROM emp ORDER BY age IS NOT NULL, age, name"), "pass"),
    ("nulls", "SELECT name, dept FROM emp", sql("SELECT name, COALESCE(dept, '') FROM emp"), "wrong"),
    ("nulls", "SELECT name FROM emp WHERE boss IS NULL", sql("SELECT name FROM emp WHERE boss = NULL"), "wrong"),
    ("nulls", "SELECT name, age FROM emp ORDER BY age", sql("SELECT name, age FROM emp ORDER BY age IS NULL, age"), "wrong"),
    # formats of the completion
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", "SELECT name FROM emp WHERE dept = 'ops';", "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("SELECT name FROM emp WHERE dept = 'ops'", "~~~"), "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("SELECT name FROM emp WHERE dept = 'ops'", tag=""), "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("SELECT name FROM emp WHERE dept = 'ops'", tag="sqlite"), "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("-- people in ops\nSELECT name\nFROM emp /* all of them */\nWHERE dept = 'ops';"), "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("select NAME from EMP where DEPT = 'ops'"), "pass"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("SELECT name FROM emp WHERE dept = 'OPS'"), "wrong"),
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", "I would select the names of people in ops.", "format"),
    # more ordinary rewrites and near misses (issue 14, second pass; the ";;" case failed before)
    ("format", "SELECT name FROM emp WHERE dept = 'ops'", sql("SELECT name FROM emp WHERE dept = 'ops';;"), "pass"),
    ("equivalent", "SELECT COUNT(*) FROM emp", sql("SELECT COUNT(1) FROM emp"), "pass"),
    ("equivalent", "SELECT COUNT(*) FROM emp", sql("SELECT SUM(1) AS n FROM emp"), "pass"),
    ("equivalent", "SELECT name FROM emp WHERE salary BETWEEN 80 AND 100", sql("SELECT name FROM emp WHERE salary >= 80 AND salary <= 100"), "pass"),
    ("equivalent", "SELECT name FROM emp WHERE salary BETWEEN 80 AND 100", sql("SELECT name FROM emp WHERE salary > 80 AND salary < 100"), "wrong"),
    ("equivalent", "SELECT name FROM emp WHERE salary = (SELECT MAX(salary) FROM emp WHERE dept = 'eng') AND dept = 'eng'",
     sql("WITH top AS (SELECT MAX(salary) AS m FROM emp WHERE dept = 'eng') SELECT name FROM emp, top WHERE salary = m AND dept = 'eng'"), "pass"),
    ("equivalent", "SELECT name FROM emp e WHERE NOT EXISTS (SELECT 1 FROM emp b WHERE b.boss = e.id)",
     sql("SELECT e.name FROM emp e LEFT JOIN emp b ON b.boss = e.id WHERE b.id IS NULL"), "pass"),
    ("nulls", "SELECT name FROM emp e WHERE NOT EXISTS (SELECT 1 FROM emp b WHERE b.boss = e.id)",
     sql("SELECT name FROM emp WHERE id NOT IN (SELECT boss FROM emp)"), "wrong"),
    ("equivalent", "SELECT name, CASE WHEN salary > 90 THEN 'high' ELSE 'low' END FROM emp",
     sql("SELECT name, IIF(salary > 90, 'high', 'low') AS band FROM emp"), "pass"),
    ("limit", "SELECT name FROM emp WHERE salary = (SELECT MAX(salary) FROM emp)", sql("SELECT name FROM emp ORDER BY salary DESC LIMIT 1"), "pass"),
    ("limit", "SELECT name FROM emp WHERE salary = (SELECT MIN(salary) FROM emp WHERE dept = 'eng')",
     sql("SELECT name FROM emp WHERE dept = 'eng' ORDER BY salary LIMIT 1"), "wrong"),
    ("ties", "SELECT dept, COUNT(*) FROM emp GROUP BY dept ORDER BY 2 DESC", sql("SELECT dept, COUNT(1) FROM emp GROUP BY dept ORDER BY COUNT(1) DESC, dept"), "pass"),
]
