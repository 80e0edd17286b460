"""Protocol drivers on a store URL, without Ray: checkpoints, GC, clones, destroy and backup."""
