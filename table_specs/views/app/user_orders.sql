-- Every user with the orders they placed (users without orders appear once, with NULL order
-- columns: the outer side turns nullable in the derived schema). `u.*` follows the users table:
-- when it gains a column, so does this view, and its schema package moves to a new version.
SELECT
  u.*,
  o.order_id,
  o.status AS order_status,
  o.amount,
  coalesce(o.amount, 0) AS amount_or_zero
FROM app.users u
LEFT JOIN shop.orders o ON o.user_id = u.id
