"""Kafka's group-coordinator module: committed offsets with their leader epoch
(`coordinator.GroupCoordinator`) and the classic group protocol (`classic_group`, after `ClassicGroup`).
"""
