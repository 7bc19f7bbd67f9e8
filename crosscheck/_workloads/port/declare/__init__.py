"""A port as the user declares it (``port.Port``, its ``fields``), the problems of a declaration said
together (``problems``), a user's own conversion (``convert``) and listed intermediates
(``intermediates``), and the port prepared for a run (``build``): both sides described, the mapping
built, the ``Workload`` the engine differentiates."""
