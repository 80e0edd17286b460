"""The actors: Bookie (interface), Inker (Journal) and Penciller (Ledger), each a plain class
made a Ray actor at the edge."""
