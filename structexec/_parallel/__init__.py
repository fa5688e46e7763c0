"""The parallel scheduler ([exec.par.scheduler]) and its replaceability API
([exec.sysctxrepl]); the backends themselves live in structexec.backends.
"""
