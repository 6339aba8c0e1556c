-- Every order with the user who placed it; users without orders appear once with NULL order
-- columns (the outer side turns nullable in the derived schema).
SELECT
  u.id AS user_id,
  u.display_name,
  u.is_active,
  o.order_id,
  o.status AS order_status,
  o.amount,
  coalesce(o.amount, 0) AS amount_or_zero
FROM app.users u
LEFT JOIN shop.orders o ON o.user_id = u.id
