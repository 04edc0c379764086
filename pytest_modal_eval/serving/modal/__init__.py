"""serving/modal"""
