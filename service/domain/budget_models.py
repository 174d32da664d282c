"""Why the service (not the backend) holds a job: its team's monthly budget is spent. Owned by the budget work of
issue 37."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class JobHold(BaseModel):
    reason: Literal["budget"] = Field(description="budget: the team's monthly chip-hour or dollar budget is spent")
    since: datetime = Field(description="when the service decided to hold the job")
    message: str = Field(description="which budget, what was spent and what is left, and how the job comes back")
