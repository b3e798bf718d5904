"""What makes many supervisors one pool: membership, rebalance, schedules, producers."""
