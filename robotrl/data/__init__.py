"""Recorded episodes on disk: local LeRobotDatasets (robotrl.data.lerobot_dataset)."""
