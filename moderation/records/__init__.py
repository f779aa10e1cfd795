"""What the guard writes and reads besides the item row, below it: live events (sent after
commit), the signed audit ledger, the queue's counter rows, a decision's outcome and its
reason codes, claims, and the read queries the pages and the API share (selectors,
timeline). Nothing here imports the guard (``moderation.review``) or anything above it."""
