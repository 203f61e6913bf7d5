"""Generate the package's built-in labelled recall dataset (``builtin_recall.json``).

The dataset is small and written for this project: 30 everyday-life scenarios (work,
health, travel, family, study, sport, moving house, friendships, money, hobbies), each
an emotional arc told in two sessions of three memory events. Queries sit in the second
session and may expect any memory encoded so far. Every query realises one of five
challenge types:

* ``affective_arc`` -- asks for the emotional peak or low point; the query state is
  close to the expected memory's affect.
* ``momentum_alignment`` -- asks when things started turning better or worse; the
  query state points in that direction.
* ``same_topic_distractor`` -- two or more memories share the topic words; the query
  state matches the intended one.
* ``semantic_confound`` -- a lexically similar but wrong memory exists; the query's
  meaning (and its state) matches the right one.
* ``recency_confound`` -- asks for the earlier of two similar events ("before ...").

The texts and base affect values are hand-written below. A seeded RNG adds a small,
reproducible jitter to every valence/arousal value, so running the script twice gives a
byte-identical file.

Usage::

    python training/make_builtin_dataset.py            # (re)write the JSON
    python training/make_builtin_dataset.py --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20260101
JITTER = 0.04
DEFAULT_TOP_K = 2
MIN_WORDS, MAX_WORDS = 10, 25
CHALLENGE_TYPES = (
    "affective_arc",
    "momentum_alignment",
    "same_topic_distractor",
    "semantic_confound",
    "recency_confound",
)
ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "src" / "emotional_memory" / "data" / "builtin_recall.json"

AA, MA, STD, SC, RC = CHALLENGE_TYPES

# Each scenario: id, topic, arc, description, two sessions (description, events) and
# the queries of session 2. Event: (memory_id, phase, valence, arousal, content).
# Query: (query_id, challenge_type, expected ids, (valence, arousal), text).
Event = tuple[str, str, float, float, str]
Query = tuple[str, str, list[str], tuple[float, float], str]

SCENARIOS: list[dict[str, Any]] = [
    # ------------------------------------------------------------------ work
    {
        "id": "work_app_launch",
        "topic": "work",
        "arc": "setback -> recovery",
        "description": "A product launch hits an embarrassing bug, then lands well.",
        "sessions": [
            ("Preparing the launch", [
                ("launch_kickoff", "anticipation", 0.6, 0.6,
                 "Kicked off the launch project with the team; everyone was buzzing about "
                 "the new booking app we would ship."),
                ("demo_crash", "setback", -0.8, 0.85,
                 "During the dry run for management the booking app crashed twice and the "
                 "director walked out without a word."),
                ("late_night_debugging", "struggle", -0.3, 0.6,
                 "Stayed in the office past midnight tracing the crash to a race condition "
                 "in the payment code."),
            ]),
            ("Launch week", [
                ("fix_confirmed", "turning point", 0.4, 0.5,
                 "The payment fix held up under load testing overnight, and for the first "
                 "time in weeks I felt hopeful."),
                ("launch_day_success", "peak", 0.9, 0.8,
                 "Launch day went smoothly; thousands of bookings came in and the director "
                 "sent the whole team a thank-you note."),
                ("minor_bug_report", "aftermath", -0.1, 0.3,
                 "A customer reported a small crash in the booking app's settings screen, "
                 "which we patched within the hour."),
            ]),
        ],
        "queries": [
            ("q_worst_moment", AA, ["demo_crash"], (-0.75, 0.8),
             "What was the most humiliating moment of the whole launch project?"),
            ("q_turning_point", MA, ["fix_confirmed"], (0.45, 0.55),
             "When did I first feel that the launch might actually work out?"),
            ("q_app_crashed", STD, ["minor_bug_report"], (-0.1, 0.3),
             "That time the booking app crashed on us."),
        ],
    },
    {
        "id": "work_promotion",
        "topic": "work",
        "arc": "joy -> worry",
        "description": "A long-awaited promotion turns into a stressful first quarter.",
        "sessions": [
            ("Getting promoted", [
                ("promotion_news", "peak", 0.9, 0.85,
                 "My manager told me I got the team lead promotion, and I called my mum "
                 "straight from the car park."),
                ("first_team_meeting", "settling in", 0.6, 0.5,
                 "Ran my first meeting as team lead; people listened, and the new role felt "
                 "surprisingly natural."),
                ("budget_spreadsheet", "routine", 0.0, 0.25,
                 "Spent the afternoon learning the department budget spreadsheet, which was "
                 "dull but manageable."),
            ]),
            ("The first quarter as lead", [
                ("missed_deadline_team", "turning point", -0.4, 0.6,
                 "Two of my reports missed the quarterly deadline and I started wondering "
                 "whether I was cut out for managing."),
                ("budget_cut_meeting", "low", -0.7, 0.75,
                 "Finance announced a budget cut for my team, and I had to tell everyone "
                 "that the hiring plan was frozen."),
                ("team_lunch_checkin", "repair", 0.1, 0.45,
                 "Took the team out for lunch to talk honestly about the workload; it was "
                 "tense but people opened up."),
            ]),
        ],
        "queries": [
            ("q_slipping", MA, ["missed_deadline_team"], (-0.35, 0.6),
             "When did the new job start to feel like it was slipping away from me?"),
            ("q_budget", STD, ["budget_cut_meeting"], (-0.65, 0.7),
             "Remind me about that budget business at work."),
            ("q_best_day", AA, ["promotion_news"], (0.85, 0.8),
             "What was the moment I was happiest about my career this year?"),
        ],
    },
    {
        "id": "work_layoff_rumours",
        "topic": "work",
        "arc": "worry -> relief",
        "description": "Weeks of layoff rumours end with the department kept safe.",
        "sessions": [
            ("Rumours", [
                ("rumour_kitchen", "worry", -0.6, 0.7,
                 "Overheard colleagues in the kitchen whispering that half the office would "
                 "be laid off before summer."),
                ("first_all_hands", "worry", -0.5, 0.65,
                 "At the first all-hands meeting the CEO dodged every question about job "
                 "cuts, which made everyone more nervous."),
                ("cv_update", "hedging", -0.2, 0.4,
                 "Quietly updated my CV in the evening and sent it to two recruiters, just "
                 "in case."),
            ]),
            ("The decision", [
                ("second_all_hands", "relief", 0.7, 0.75,
                 "At the second all-hands meeting the CEO confirmed that our department was "
                 "safe and the room actually cheered."),
                ("recruiter_call", "calm", 0.3, 0.35,
                 "A recruiter called back with an interesting offer, but I told her I was "
                 "staying for now."),
                ("team_drinks_relief", "celebration", 0.8, 0.6,
                 "We went for drinks after work to celebrate keeping our jobs, laughing "
                 "about how scared we had been."),
            ]),
        ],
        "queries": [
            ("q_earlier_all_hands", RC, ["first_all_hands"], (-0.45, 0.6),
             "How did the all-hands meeting go before the CEO finally gave us an answer?"),
            ("q_first_rumour", SC, ["rumour_kitchen"], (-0.55, 0.65),
             "When did I first get wind that jobs might be on the line?"),
        ],
    },
    # ---------------------------------------------------------------- health
    {
        "id": "health_knee_injury",
        "topic": "health",
        "arc": "setback -> recovery",
        "description": "A knee injury on the football pitch and the slow way back.",
        "sessions": [
            ("The injury", [
                ("knee_twist_fall", "setback", -0.85, 0.9,
                 "Twisted my knee badly on a wet five-a-side pitch and had to be helped off, "
                 "shaking with pain."),
                ("first_physio_visit", "worry", -0.5, 0.5,
                 "First physio appointment: she pressed on the knee, frowned, and said "
                 "recovery would take months."),
                ("crutches_commute", "small kindness", 0.2, 0.3,
                 "Took the bus to work on crutches and a stranger gave me their seat, which "
                 "felt oddly kind."),
            ]),
            ("Rehab", [
                ("physio_progress", "turning point", 0.6, 0.55,
                 "At the next physio appointment she smiled and said the knee was healing "
                 "faster than expected."),
                ("first_jog_back", "peak", 0.85, 0.7,
                 "Managed a slow ten-minute jog around the park without pain and nearly "
                 "cried with relief."),
                ("stairs_twinge", "wobble", -0.2, 0.4,
                 "Felt a sharp twinge in the knee on the office stairs, but it faded after a "
                 "few minutes."),
            ]),
        ],
        "queries": [
            ("q_earlier_physio", RC, ["first_physio_visit"], (-0.45, 0.5),
             "What did the physio say about my knee before the good news came?"),
            ("q_worst_pain", AA, ["knee_twist_fall"], (-0.8, 0.85),
             "Which moment was the most painful and frightening part of the injury?"),
            ("q_upturn", MA, ["physio_progress"], (0.55, 0.55),
             "When did my recovery start heading in the right direction?"),
        ],
    },
    {
        "id": "health_scan_results",
        "topic": "health",
        "arc": "worry -> relief",
        "description": "A worrying lump, an anxious scan, and an all-clear.",
        "sessions": [
            ("Waiting", [
                ("gp_lump_found", "worry", -0.6, 0.7,
                 "The GP found a lump in my neck during a routine check and referred me for "
                 "a scan."),
                ("scan_appointment", "fear", -0.5, 0.75,
                 "Lay very still in the scan machine for forty minutes, counting the clicks "
                 "and trying not to panic."),
                ("sister_reassurance", "comfort", 0.4, 0.3,
                 "My sister came over with soup and sat with me all evening so I wouldn't be "
                 "alone with my thoughts."),
            ]),
            ("Results", [
                ("results_phone_call", "relief", 0.9, 0.8,
                 "The hospital rang to say the scan results were clear; the lump was just a "
                 "harmless swollen gland."),
                ("follow_up_scan_booked", "admin", 0.05, 0.15,
                 "Booked a routine follow-up scan for next year, a boring admin task that "
                 "barely registered."),
                ("celebration_dinner", "gratitude", 0.75, 0.5,
                 "Took my sister out for a nice dinner to thank her for holding me together "
                 "during those weeks."),
            ]),
        ],
        "queries": [
            ("q_the_scan", STD, ["scan_appointment"], (-0.5, 0.75),
             "Tell me about the scan."),
            ("q_all_clear", SC, ["results_phone_call"], (0.8, 0.7),
             "When did I learn there was nothing to worry about with my neck?"),
        ],
    },
    {
        "id": "health_burnout",
        "topic": "health",
        "arc": "decline -> recovery",
        "description": "Burning out at work, time off, and a gradual recovery.",
        "sessions": [
            ("Running on empty", [
                ("sleepless_week", "decline", -0.5, 0.55,
                 "Slept about four hours a night all week and kept forgetting words in the "
                 "middle of sentences."),
                ("doctor_sick_note", "low", -0.7, 0.45,
                 "The doctor said I was burning out and signed me off work for two weeks, "
                 "which felt like failing."),
                ("first_canal_walk", "numb", -0.2, 0.2,
                 "Went for a short morning walk by the canal; it was grey and I barely "
                 "noticed anything."),
            ]),
            ("Recovering", [
                ("canal_walk_sunrise", "turning point", 0.7, 0.3,
                 "On a morning walk by the canal I watched the sunrise and felt genuinely "
                 "calm for the first time in months."),
                ("return_to_work", "cautious", 0.4, 0.45,
                 "Went back to work on reduced hours and my manager promised to protect my "
                 "afternoons."),
                ("panic_inbox", "wobble", -0.4, 0.7,
                 "Opened my inbox to three hundred unread emails and felt my chest tighten "
                 "for a moment."),
            ]),
        ],
        "queries": [
            ("q_earlier_walk", RC, ["first_canal_walk"], (-0.2, 0.2),
             "What was the canal walk like before I started feeling better?"),
            ("q_most_defeated", AA, ["doctor_sick_note"], (-0.65, 0.45),
             "When did I feel most defeated during the burnout?"),
            ("q_lifting", MA, ["canal_walk_sunrise"], (0.6, 0.35),
             "When did the burnout begin to lift?"),
        ],
    },
    # ---------------------------------------------------------------- travel
    {
        "id": "travel_lost_luggage",
        "topic": "travel",
        "arc": "setback -> recovery",
        "description": "A holiday in Lisbon that starts without a suitcase.",
        "sessions": [
            ("Arriving in Lisbon", [
                ("flight_landing", "anticipation", 0.8, 0.7,
                 "Landed in Lisbon on a bright afternoon, excited to finally start the "
                 "holiday I had saved for all year."),
                ("empty_carousel", "setback", -0.7, 0.75,
                 "Stood at the empty baggage carousel for an hour before accepting that my "
                 "suitcase had not arrived."),
                ("airport_desk_form", "frustration", -0.4, 0.4,
                 "Filled in a long lost-property form at the airline desk while the clerk "
                 "yawned at me."),
            ]),
            ("The rest of the trip", [
                ("market_shirts", "making do", 0.4, 0.5,
                 "Bought cheap shirts at a market and laughed with the stall owner about my "
                 "missing suitcase."),
                ("suitcase_delivered", "relief", 0.85, 0.8,
                 "The suitcase turned up at the hotel on day three, and I hugged the "
                 "delivery driver."),
                ("tram_ride_view", "contentment", 0.7, 0.35,
                 "Rode the old yellow tram up the hill and watched the city roofs glow "
                 "orange at dusk."),
            ]),
        ],
        "queries": [
            ("q_bag_gone", SC, ["empty_carousel"], (-0.65, 0.7),
             "The moment I understood my suitcase had gone missing."),
            ("q_suitcase", STD, ["suitcase_delivered"], (0.8, 0.75),
             "Something about my suitcase on that trip."),
        ],
    },
    {
        "id": "travel_mountain_hike",
        "topic": "travel",
        "arc": "joy -> fear -> relief",
        "description": "A ridge walk with a friend that turns frightening in fog.",
        "sessions": [
            ("Planning the hike", [
                ("hike_route_planning", "anticipation", 0.6, 0.5,
                 "Spread the mountain map on the kitchen table and planned a two-day ridge "
                 "walk with Tom."),
                ("gear_shopping", "routine", 0.1, 0.4,
                 "Bought new boots and a waterproof jacket, far more than I meant to spend "
                 "on gear."),
                ("training_hill_walk", "confidence", 0.5, 0.45,
                 "Did a training walk up the local hill in drizzle and felt fitter than I "
                 "expected."),
            ]),
            ("On the ridge", [
                ("summit_morning", "peak", 0.9, 0.75,
                 "Reached the first summit at dawn with Tom, the valley full of cloud "
                 "beneath us, absolutely elated."),
                ("fog_lost_path", "fear", -0.75, 0.85,
                 "Fog rolled in on the ridge, we lost the path, and Tom's phone battery "
                 "died."),
                ("found_hut", "relief", 0.6, 0.6,
                 "Spotted the mountain hut's light through the mist and finally stopped "
                 "shaking once we were inside."),
            ]),
        ],
        "queries": [
            ("q_earlier_walk", RC, ["training_hill_walk"], (0.5, 0.45),
             "How did the walk uphill go before the real trip with Tom?"),
            ("q_going_wrong", MA, ["fog_lost_path"], (-0.6, 0.8),
             "When did the hike start going wrong?"),
            ("q_shelter", SC, ["found_hut"], (0.55, 0.6),
             "When did we finally reach somewhere safe and warm?"),
        ],
    },
    {
        "id": "travel_missed_connection",
        "topic": "travel",
        "arc": "stress -> rescue -> success",
        "description": "A train journey to a conference derailed by a missed connection.",
        "sessions": [
            ("Outbound", [
                ("train_booking", "anticipation", 0.5, 0.4,
                 "Booked the overnight train to Vienna for a conference and chose a cosy "
                 "sleeper cabin."),
                ("delayed_departure", "worry", -0.4, 0.65,
                 "The first train left Munich ninety minutes late and I kept checking my "
                 "connection time."),
                ("missed_connection", "low", -0.8, 0.9,
                 "Ran across the platform in Salzburg just as my connecting train pulled "
                 "away without me."),
            ]),
            ("Getting there", [
                ("kind_conductor", "rescue", 0.7, 0.5,
                 "A kind conductor rebooked me onto a later train for free and even brought "
                 "me a coffee."),
                ("conference_talk", "peak", 0.8, 0.7,
                 "Gave my conference talk in Vienna to a packed room and answered every "
                 "question confidently."),
                ("return_train_delay", "calm", 0.1, 0.2,
                 "The return train was delayed twenty minutes, but I just read my book and "
                 "didn't mind."),
            ]),
        ],
        "queries": [
            ("q_most_stressful", AA, ["missed_connection"], (-0.75, 0.85),
             "What was the most stressful moment of the Vienna journey?"),
            ("q_rescued", SC, ["kind_conductor"], (0.6, 0.5),
             "When did someone help me get back on track after the train fiasco?"),
            ("q_train_delay", STD, ["return_train_delay"], (0.1, 0.2),
             "Remind me about that train delay."),
        ],
    },
    # ---------------------------------------------------------------- family
    {
        "id": "family_new_baby",
        "topic": "family",
        "arc": "joy -> exhaustion -> joy",
        "description": "The birth of a daughter and the first hard months.",
        "sessions": [
            ("The birth", [
                ("baby_born", "peak", 0.95, 0.85,
                 "Our daughter was born just after four in the morning and I held her while "
                 "the midwife cried too."),
                ("hospital_night", "elation", 0.6, 0.7,
                 "Spent the first night on a plastic hospital chair, too wired and happy to "
                 "sleep."),
                ("grandparents_visit", "warmth", 0.7, 0.45,
                 "My parents visited with a knitted blanket and my dad held the baby as if "
                 "she were glass."),
            ]),
            ("The first months", [
                ("colic_night", "low", -0.7, 0.8,
                 "Third hour of colic crying at night; we were both exhausted and snapping "
                 "at each other."),
                ("first_smile", "turning point", 0.8, 0.6,
                 "She gave her first real smile during a nappy change and suddenly the "
                 "sleepless weeks felt worth it."),
                ("night_feed_routine", "calm", 0.4, 0.2,
                 "The night feeds settled into a quiet routine, just me, the baby and the "
                 "radio on low."),
            ]),
        ],
        "queries": [
            ("q_hardest", AA, ["colic_night"], (-0.65, 0.8),
             "What was the hardest point of the first months with the baby?"),
            ("q_rewarding", MA, ["first_smile"], (0.7, 0.6),
             "When did parenting start to feel rewarding again?"),
            ("q_nights", STD, ["night_feed_routine"], (0.4, 0.2),
             "Those nights with the baby."),
        ],
    },
    {
        "id": "family_grandad",
        "topic": "family",
        "arc": "worry -> grief -> warmth",
        "description": "A grandfather's fall, his last weeks, and remembering him.",
        "sessions": [
            ("Grandad in hospital", [
                ("grandad_fall_call", "shock", -0.75, 0.85,
                 "Mum phoned to say grandad had fallen at home and was being taken to "
                 "hospital by ambulance."),
                ("first_hospital_visit", "sadness", -0.6, 0.5,
                 "Visited grandad on the ward; he was confused and kept asking when he could "
                 "go home."),
                ("old_photos", "fondness", 0.4, 0.3,
                 "Looked through old photos of grandad as a young sailor and smiled at his "
                 "ridiculous moustache."),
            ]),
            ("Saying goodbye", [
                ("last_hospital_visit", "bittersweet", 0.2, 0.45,
                 "On my last visit to the ward grandad squeezed my hand and told me a joke "
                 "about sailors."),
                ("funeral_day", "grief", -0.3, 0.7,
                 "At the funeral the whole family sang his favourite sea shanty, crying and "
                 "laughing at once."),
                ("memory_box", "warmth", 0.35, 0.25,
                 "Put grandad's medals and letters into a wooden box to keep for my own "
                 "children one day."),
            ]),
        ],
        "queries": [
            ("q_earlier_visit", RC, ["first_hospital_visit"], (-0.55, 0.5),
             "What was grandad like when I saw him in hospital before the final visit?"),
            ("q_bad_news", SC, ["grandad_fall_call"], (-0.7, 0.8),
             "When did I first hear that grandad had been hurt?"),
        ],
    },
    {
        "id": "family_brother_rift",
        "topic": "family",
        "arc": "conflict -> reconciliation",
        "description": "A bitter row with a brother over a family house, then making up.",
        "sessions": [
            ("The argument", [
                ("christmas_plans", "warmth", 0.5, 0.4,
                 "My brother and I started planning Christmas at mum's house, swapping ideas "
                 "over cheerful messages."),
                ("inheritance_row", "anger", -0.85, 0.9,
                 "The conversation about dad's old house turned into a shouting match with "
                 "my brother on the phone."),
                ("silent_weeks", "sadness", -0.5, 0.35,
                 "Weeks went by without a single message from my brother, and I kept "
                 "drafting apologies I never sent."),
            ]),
            ("Making up", [
                ("brother_text", "turning point", 0.5, 0.6,
                 "My brother finally texted a photo of us as kids with one word: sorry. I "
                 "felt the knot loosen."),
                ("coffee_talk", "calm", 0.6, 0.4,
                 "We met for coffee and talked about dad's house calmly, agreeing to sell it "
                 "together."),
                ("christmas_together", "joy", 0.85, 0.65,
                 "Christmas at mum's house was loud and happy; my brother and I cooked the "
                 "dinner side by side."),
            ]),
        ],
        "queries": [
            ("q_house_talk", STD, ["coffee_talk"], (0.55, 0.4),
             "That conversation with my brother about dad's house."),
            ("q_thaw", MA, ["brother_text"], (0.45, 0.6),
             "When did things with my brother begin to thaw?"),
            ("q_angriest", AA, ["inheritance_row"], (-0.8, 0.9),
             "What was the angriest I got during the whole family falling-out?"),
        ],
    },
    # ----------------------------------------------------------------- study
    {
        "id": "study_thesis",
        "topic": "study",
        "arc": "struggle -> success",
        "description": "Writing a master's thesis through data loss to submission.",
        "sessions": [
            ("Writing", [
                ("thesis_topic_approved", "hope", 0.7, 0.6,
                 "My supervisor approved my thesis topic on urban bee populations and I left "
                 "her office grinning."),
                ("data_loss", "disaster", -0.85, 0.85,
                 "My laptop died and took three weeks of bee survey data with it, none of it "
                 "backed up."),
                ("first_draft_feedback", "discouraged", -0.45, 0.5,
                 "Got first-draft feedback covered in red ink; my supervisor said the "
                 "argument was still unclear."),
            ]),
            ("Finishing", [
                ("second_draft_feedback", "relief", 0.6, 0.5,
                 "Feedback on the second draft was short: much clearer, just fix the "
                 "references. I felt lighter instantly."),
                ("thesis_submitted", "peak", 0.8, 0.75,
                 "Uploaded the final thesis at eleven at night, then sat on the floor "
                 "laughing in disbelief."),
                ("graduation_photo", "contentment", 0.7, 0.45,
                 "Posed for graduation photos with my parents, the gown too big, everyone "
                 "squinting into the sun."),
            ]),
        ],
        "queries": [
            ("q_earlier_feedback", RC, ["first_draft_feedback"], (-0.4, 0.5),
             "What did my supervisor think of the draft before it got down to the "
             "references?"),
            ("q_lost_work", SC, ["data_loss"], (-0.8, 0.85),
             "When did I lose weeks of thesis work in one go?"),
            ("q_proudest", AA, ["thesis_submitted"], (0.8, 0.75),
             "What was the proudest, most giddy moment of the thesis?"),
        ],
    },
    {
        "id": "study_driving_test",
        "topic": "study",
        "arc": "failure -> success",
        "description": "Failing a driving test, practising, and passing the retake.",
        "sessions": [
            ("First attempt", [
                ("first_driving_test", "failure", -0.75, 0.8,
                 "Failed my first driving test after stalling at a roundabout; the "
                 "examiner's silence was unbearable."),
                ("lessons_booked", "resolve", 0.2, 0.4,
                 "Booked ten extra driving lessons with a patient instructor who called "
                 "roundabouts just big circles."),
                ("parking_practice", "routine", 0.1, 0.3,
                 "Practised parallel parking in an empty supermarket car park with dad until "
                 "it became boring."),
            ]),
            ("Second attempt", [
                ("smooth_roundabout", "turning point", 0.6, 0.55,
                 "In a lesson I took the big roundabout smoothly three times in a row and "
                 "started to believe I could pass."),
                ("second_driving_test", "peak", 0.9, 0.85,
                 "Passed my second driving test with only two minor faults and shouted with "
                 "joy in the car park."),
                ("first_solo_drive", "freedom", 0.8, 0.6,
                 "Drove alone to the coast for the first time with the music loud and all "
                 "the windows down."),
            ]),
        ],
        "queries": [
            ("q_earlier_test", RC, ["first_driving_test"], (-0.7, 0.8),
             "How did the driving test go before I got my licence?"),
            ("q_coming_together", MA, ["smooth_roundabout"], (0.55, 0.55),
             "When did my driving start to come together?"),
            ("q_best_moment", AA, ["second_driving_test"], (0.9, 0.85),
             "What was the single most exhilarating moment of learning to drive?"),
        ],
    },
    {
        "id": "study_japanese_course",
        "topic": "study",
        "arc": "embarrassment -> fluency",
        "description": "An evening Japanese course from blank stares to real conversations.",
        "sessions": [
            ("Starting Japanese", [
                ("first_japanese_class", "embarrassment", -0.3, 0.6,
                 "First evening Japanese class: I couldn't even pronounce my own name "
                 "properly and went red."),
                ("flashcards_habit", "steady", 0.4, 0.25,
                 "Started doing twenty kanji flashcards every morning on the train; slow, "
                 "steady and satisfying."),
                ("speaking_test_blank", "low", -0.7, 0.75,
                 "In the speaking test my mind went completely blank and the teacher had to "
                 "prompt me twice."),
            ]),
            ("Progress", [
                ("restaurant_order", "pride", 0.8, 0.65,
                 "Ordered a whole meal in Japanese at the little restaurant near work and "
                 "the owner beamed."),
                ("speaking_test_pass", "calm success", 0.6, 0.4,
                 "Passed the end-of-term speaking test calmly, chatting with the teacher "
                 "about my weekend."),
                ("pen_pal_letter", "joy", 0.7, 0.45,
                 "Received a letter from my pen pal in Osaka and understood almost every "
                 "sentence."),
            ]),
        ],
        "queries": [
            ("q_speaking_test", STD, ["speaking_test_blank"], (-0.65, 0.75),
             "What do I recall of the Japanese speaking test?"),
            ("q_native_delighted", SC, ["restaurant_order"], (0.75, 0.6),
             "When did a native speaker seem delighted by my Japanese?"),
        ],
    },
    # ----------------------------------------------------------------- sport
    {
        "id": "sport_marathon",
        "topic": "sport",
        "arc": "doubt -> collapse -> triumph",
        "description": "Training for and running a first marathon.",
        "sessions": [
            ("Training", [
                ("marathon_signup", "impulse", 0.2, 0.7,
                 "Signed up for the city marathon after a glass of wine, then panicked about "
                 "what I'd done."),
                ("long_run_cramp", "setback", -0.6, 0.6,
                 "On a twenty-mile training run my calf cramped and I limped home feeling "
                 "like a fraud."),
                ("runners_documentary", "curiosity", 0.1, 0.5,
                 "Watched a documentary about elite marathon runners collapsing in the heat; "
                 "strangely gripping."),
            ]),
            ("Race day", [
                ("wall_at_thirty", "low", -0.8, 0.85,
                 "At kilometre thirty my legs gave out and I had to walk, tears streaming, "
                 "convinced I would quit."),
                ("crowd_cheering", "turning point", 0.6, 0.75,
                 "A stranger in the crowd shouted the name on my bib and suddenly I was "
                 "running again."),
                ("finish_line", "peak", 0.95, 0.85,
                 "Crossed the finish line in four hours twelve and sobbed into a foil "
                 "blanket, utterly proud."),
            ]),
        ],
        "queries": [
            ("q_collapsed", SC, ["wall_at_thirty"], (-0.75, 0.8),
             "The time I collapsed during the marathon."),
            ("q_proudest", AA, ["finish_line"], (0.9, 0.85),
             "What was the proudest moment of my marathon year?"),
            ("q_second_wind", MA, ["crowd_cheering"], (0.55, 0.75),
             "When did the race turn around for me?"),
        ],
    },
    {
        "id": "sport_football_season",
        "topic": "sport",
        "arc": "winning -> decline",
        "description": "A Sunday league season that starts brilliantly and fades.",
        "sessions": [
            ("Winning streak", [
                ("cup_quarterfinal_win", "peak", 0.9, 0.9,
                 "Our Sunday league team won the cup quarter-final on penalties and we "
                 "danced in the muddy goalmouth."),
                ("team_training", "routine", 0.0, 0.55,
                 "Midweek training in the rain; the coach made us run drills until our legs "
                 "burned."),
                ("first_derby", "tension", 0.1, 0.6,
                 "Drew the first derby against the rival village one-all, a scrappy and "
                 "nervy game."),
            ]),
            ("The slide", [
                ("captain_injured", "turning point", -0.5, 0.6,
                 "Our captain tore a hamstring in the warm-up and the whole team went "
                 "quiet."),
                ("second_derby", "low", -0.8, 0.65,
                 "Lost the second derby against the rival village four-nil and nobody spoke "
                 "in the changing room."),
                ("season_awards", "consolation", 0.6, 0.5,
                 "At the season awards night I was named most improved player, which "
                 "softened a rough end to the year."),
            ]),
        ],
        "queries": [
            ("q_earlier_derby", RC, ["first_derby"], (0.1, 0.6),
             "How did the derby go before the heavy defeat?"),
            ("q_falling_apart", MA, ["captain_injured"], (-0.45, 0.6),
             "When did our season start falling apart?"),
            ("q_derby", STD, ["second_derby"], (-0.75, 0.65),
             "That derby against the rival village."),
        ],
    },
    {
        "id": "sport_learning_to_swim",
        "topic": "sport",
        "arc": "fear -> confidence",
        "description": "An adult learner overcoming a fear of deep water.",
        "sessions": [
            ("Afraid of water", [
                ("pool_panic", "fear", -0.8, 0.9,
                 "In the first adult swimming lesson I panicked at the deep end and grabbed "
                 "the instructor's arm."),
                ("shallow_float", "trust", 0.3, 0.35,
                 "Practised floating in the shallow end of the pool, slowly learning to "
                 "trust the water."),
                ("beach_memory_story", "reflection", -0.3, 0.5,
                 "Told the instructor about nearly drowning on a beach as a child, which "
                 "explained a lot."),
            ]),
            ("Swimming", [
                ("deep_end_length", "pride", 0.8, 0.8,
                 "Swam a full length ending at the deep end of the pool without stopping, "
                 "heart pounding with pride."),
                ("lake_swim", "calm joy", 0.75, 0.3,
                 "Joined friends for a calm evening swim in the lake, the water warm and "
                 "completely still."),
                ("goggles_leak", "annoyance", -0.25, 0.35,
                 "My goggles leaked all session and I spent the lesson squinting, mildly "
                 "annoyed."),
            ]),
        ],
        "queries": [
            ("q_deep_end", STD, ["deep_end_length"], (0.75, 0.8),
             "That moment at the deep end of the pool."),
            ("q_most_scared", AA, ["pool_panic"], (-0.75, 0.9),
             "When was I most terrified while learning to swim?"),
            ("q_open_water", SC, ["lake_swim"], (0.7, 0.3),
             "When did swimming in open water feel relaxing rather than scary?"),
        ],
    },
    # ---------------------------------------------------------------- moving
    {
        "id": "moving_new_city",
        "topic": "moving house",
        "arc": "excitement -> loneliness -> belonging",
        "description": "Moving to Glasgow for a job and slowly making it home.",
        "sessions": [
            ("Arriving in Glasgow", [
                ("job_offer_glasgow", "excitement", 0.8, 0.75,
                 "Accepted a job in Glasgow and spent the evening looking at flats online, "
                 "giddy with possibility."),
                ("moving_van", "numb", 0.0, 0.5,
                 "Loaded my whole life into a rented van and drove north in the rain, "
                 "feeling a bit numb."),
                ("first_weekend_alone", "loneliness", -0.6, 0.3,
                 "First weekend in the new flat: nobody to call, so I ate takeaway on the "
                 "floor among boxes."),
            ]),
            ("Settling", [
                ("climbing_club", "turning point", 0.6, 0.6,
                 "Joined a climbing club and two people invited me for drinks afterwards; I "
                 "walked home smiling."),
                ("second_weekend_alone", "contentment", 0.35, 0.25,
                 "Another weekend alone in the flat, but this time I read in the park and "
                 "quite enjoyed it."),
                ("birthday_party_glasgow", "belonging", 0.9, 0.8,
                 "My new friends threw me a surprise birthday party and I realised Glasgow "
                 "finally felt like home."),
            ]),
        ],
        "queries": [
            ("q_earlier_weekend", RC, ["first_weekend_alone"], (-0.55, 0.3),
             "What was a weekend on my own like before I settled in?"),
            ("q_right_decision", MA, ["climbing_club"], (0.55, 0.6),
             "When did the move start to feel like the right decision?"),
        ],
    },
    {
        "id": "moving_flat_hunt",
        "topic": "moving house",
        "arc": "frustration -> relief",
        "description": "A long, discouraging flat hunt that ends with a lease.",
        "sessions": [
            ("Searching", [
                ("viewing_mould", "disgust", -0.5, 0.5,
                 "Viewed a flat with black mould across the bathroom ceiling while the agent "
                 "called it full of character."),
                ("outbid_flat", "disappointment", -0.75, 0.7,
                 "Lost the perfect flat to someone who offered more rent; I stared at the "
                 "rejection email for ages."),
                ("spreadsheet_flats", "organising", 0.1, 0.25,
                 "Made a spreadsheet of twenty flats sorted by rent and commute time over a "
                 "cup of tea."),
            ]),
            ("Signing", [
                ("viewing_sunny_flat", "excitement", 0.8, 0.75,
                 "Viewed a sunny flat with a balcony over the park and knew within a minute "
                 "that I wanted it."),
                ("lease_signed", "relief", 0.7, 0.6,
                 "Signed the lease at the letting agent's office, hands a little shaky, keys "
                 "in my pocket."),
                ("deposit_transfer", "admin", -0.1, 0.3,
                 "Transferred the deposit and first month's rent, watching my savings drop "
                 "without much feeling."),
            ]),
        ],
        "queries": [
            ("q_viewing", STD, ["viewing_sunny_flat"], (0.8, 0.75),
             "Tell me about that flat viewing."),
            ("q_missed_out", SC, ["outbid_flat"], (-0.7, 0.7),
             "When did I miss out on the place I really wanted?"),
            ("q_earlier_viewing", RC, ["viewing_mould"], (-0.45, 0.5),
             "What was a flat viewing like before I found the one?"),
        ],
    },
    {
        "id": "moving_renovation",
        "topic": "moving house",
        "arc": "disaster -> rebuilding",
        "description": "Buying a run-down first house and renovating it.",
        "sessions": [
            ("The old house", [
                ("house_keys", "joy", 0.85, 0.75,
                 "Got the keys to our first house, a wreck with good bones, and drank cheap "
                 "fizz on the doorstep."),
                ("first_builder_quote", "dread", -0.6, 0.65,
                 "The first builder quoted for the roof and the number made my stomach "
                 "drop."),
                ("ceiling_collapse", "disaster", -0.9, 0.9,
                 "Part of the kitchen ceiling collapsed onto the table overnight, plaster "
                 "and water everywhere."),
            ]),
            ("Rebuilding", [
                ("second_builder_quote", "turning point", 0.6, 0.55,
                 "A second builder quoted for the roof at half the price and seemed honest; "
                 "we shook hands gratefully."),
                ("new_kitchen_done", "contentment", 0.85, 0.55,
                 "The new kitchen was finished and we cooked our first proper meal in it by "
                 "candlelight."),
                ("paint_argument", "bickering", 0.0, 0.5,
                 "Argued with my partner over paint colours for the hallway, then laughed "
                 "about how silly it was."),
            ]),
        ],
        "queries": [
            ("q_earlier_quote", RC, ["first_builder_quote"], (-0.55, 0.65),
             "What did the builder quote before we found someone reasonable?"),
            ("q_worst", AA, ["ceiling_collapse"], (-0.85, 0.9),
             "What was the worst moment of doing up the house?"),
            ("q_looking_up", MA, ["second_builder_quote"], (0.55, 0.55),
             "When did the renovation start looking up?"),
        ],
    },
    # ----------------------------------------------------------- friendships
    {
        "id": "friend_priya_rift",
        "topic": "friendships",
        "arc": "hurt -> repair",
        "description": "A forgotten birthday strains a close friendship, then it heals.",
        "sessions": [
            ("The rift", [
                ("birthday_forgotten", "hurt", -0.6, 0.55,
                 "Priya forgot my birthday completely, and then posted photos from a party "
                 "the same night."),
                ("awkward_lunch", "tension", -0.3, 0.45,
                 "Had an awkward lunch with Priya where we both avoided mentioning the "
                 "birthday."),
                ("book_club_laughs", "distraction", 0.6, 0.5,
                 "Book club night with Sam and Jo was full of laughs, a welcome distraction "
                 "from the Priya situation."),
            ]),
            ("Repair", [
                ("honest_walk", "turning point", 0.5, 0.55,
                 "Went for a long walk with Priya and finally said how hurt I was; she "
                 "listened and apologised."),
                ("easy_lunch", "warmth", 0.75, 0.45,
                 "Lunch with Priya felt easy again; we shared dessert and planned a weekend "
                 "away."),
                ("coast_weekend", "joy", 0.85, 0.65,
                 "Our weekend trip to the coast with Priya was full of silly photos and "
                 "late-night talks."),
            ]),
        ],
        "queries": [
            ("q_earlier_lunch", RC, ["awkward_lunch"], (-0.3, 0.45),
             "How did lunch with Priya go before we cleared the air?"),
            ("q_mending", MA, ["honest_walk"], (0.45, 0.55),
             "When did my friendship with Priya begin to mend?"),
            ("q_ignored_birthday", SC, ["birthday_forgotten"], (-0.55, 0.55),
             "When did Priya completely ignore my birthday?"),
        ],
    },
    {
        "id": "friend_best_man",
        "topic": "friendships",
        "arc": "nerves -> triumph",
        "description": "Being best man at a close friend's wedding.",
        "sessions": [
            ("Best man duties", [
                ("asked_best_man", "honour", 0.7, 0.7,
                 "Dan asked me to be best man at his wedding and I said yes before realising "
                 "it meant a speech."),
                ("first_speech_rehearsal", "anxiety", -0.5, 0.6,
                 "Rehearsed the speech in front of my flatmate; the jokes fell flat and I "
                 "stumbled over every line."),
                ("stag_weekend", "fun", 0.6, 0.8,
                 "The stag weekend in Bristol was chaotic fun, though I lost my voice from "
                 "singing."),
            ]),
            ("The wedding", [
                ("second_speech_rehearsal", "confidence", 0.55, 0.5,
                 "Rehearsed the speech again the night before and it flowed; even my "
                 "flatmate laughed."),
                ("speech_delivered", "peak", 0.9, 0.85,
                 "Delivered the best man speech to a roaring room; Dan hugged me and his "
                 "gran wiped her eyes."),
                ("wedding_hangover", "comedown", -0.2, 0.35,
                 "Woke up after the wedding with a pounding head and a vague memory of "
                 "dancing on a chair."),
            ]),
        ],
        "queries": [
            ("q_earlier_rehearsal", RC, ["first_speech_rehearsal"], (-0.45, 0.6),
             "How did my speech practice go before things clicked?"),
            ("q_proudest", AA, ["speech_delivered"], (0.85, 0.85),
             "What was my proudest moment at Dan's wedding?"),
            ("q_rehearsal", STD, ["second_speech_rehearsal"], (0.55, 0.5),
             "Rehearsing the speech in front of my flatmate."),
        ],
    },
    {
        "id": "friend_new_crowd",
        "topic": "friendships",
        "arc": "isolation -> belonging",
        "description": "Finding a place in a group of new colleagues.",
        "sessions": [
            ("Newcomer", [
                ("quiz_night_silent", "isolation", -0.5, 0.4,
                 "First pub quiz with my new colleagues; I barely spoke and went home early "
                 "feeling invisible."),
                ("message_ignored", "rejection", -0.6, 0.5,
                 "Suggested a cinema trip in the group chat and nobody replied for two "
                 "days."),
                ("solo_cinema", "contentment", 0.5, 0.3,
                 "Went to the cinema on my own and actually loved the film and the "
                 "quiet."),
            ]),
            ("Fitting in", [
                ("quiz_night_win", "peak", 0.85, 0.85,
                 "Our team won the pub quiz thanks to my obscure geography answer and "
                 "everyone chanted my name."),
                ("invited_dinner", "belonging", 0.7, 0.55,
                 "Marta invited me to her dinner party, and I realised they now counted me "
                 "as one of them."),
                ("group_chat_joke", "amusement", 0.55, 0.5,
                 "My joke in the group chat got a dozen laughing replies, which made me grin "
                 "at my desk."),
            ]),
        ],
        "queries": [
            ("q_quiz_night", STD, ["quiz_night_win"], (0.8, 0.85),
             "What happened at that pub quiz night?"),
            ("q_accepted", SC, ["invited_dinner"], (0.65, 0.55),
             "When did it sink in that the group had accepted me?"),
        ],
    },
    # ----------------------------------------------------------------- money
    {
        "id": "money_card_debt",
        "topic": "money",
        "arc": "shock -> control -> freedom",
        "description": "Facing and paying off a credit card debt.",
        "sessions": [
            ("In the red", [
                ("card_statement_shock", "shock", -0.85, 0.8,
                 "Opened the credit card statement and saw I owed over six thousand pounds; "
                 "I felt sick."),
                ("budget_app", "sobering", -0.2, 0.45,
                 "Set up a budgeting app and categorised every purchase from the last month, "
                 "which was sobering."),
                ("first_overpayment", "control", 0.3, 0.4,
                 "Made my first extra payment towards the card, a small amount, and felt a "
                 "flicker of control."),
            ]),
            ("Paying it off", [
                ("second_overpayment", "momentum", 0.45, 0.45,
                 "Made another extra payment towards the card after selling my old bike "
                 "online."),
                ("bonus_windfall", "luck", 0.7, 0.7,
                 "A surprise work bonus arrived and I put almost all of it straight onto the "
                 "debt."),
                ("debt_cleared", "peak", 0.9, 0.8,
                 "The card balance finally showed zero; I cut the card in half at the "
                 "kitchen table, laughing."),
            ]),
        ],
        "queries": [
            ("q_free", SC, ["debt_cleared"], (0.85, 0.8),
             "When was I finally free of what I owed?"),
            ("q_most_frightening", AA, ["card_statement_shock"], (-0.8, 0.8),
             "When did the money situation feel most frightening?"),
            ("q_earlier_payment", RC, ["first_overpayment"], (0.3, 0.4),
             "What was the extra card payment like before I sold the bike?"),
        ],
    },
    {
        "id": "money_car_breakdown",
        "topic": "money",
        "arc": "setback -> recovery",
        "description": "A car dies expensively and is replaced on a tight budget.",
        "sessions": [
            ("Car trouble", [
                ("warning_light", "alarm", -0.6, 0.8,
                 "A warning light came on the dashboard on the motorway and I pulled over, "
                 "heart racing."),
                ("garage_estimate", "despair", -0.75, 0.6,
                 "The garage said the gearbox was finished and the repair would cost more "
                 "than the car was worth."),
                ("bus_commute", "adapting", 0.1, 0.3,
                 "Started taking the bus to work, which was slower but gave me time to "
                 "read."),
            ]),
            ("Sorting it out", [
                ("cheap_car_found", "turning point", 0.6, 0.6,
                 "Found a reliable small car for sale by a retired teacher at a price I "
                 "could just afford."),
                ("garage_service", "reassurance", 0.6, 0.35,
                 "Took the new car to the garage for a routine service and the mechanic said "
                 "it was in great shape."),
                ("parking_ticket", "irritation", -0.35, 0.45,
                 "Got a parking ticket outside the dentist, an irritating end to an "
                 "otherwise fine day."),
            ]),
        ],
        "queries": [
            ("q_garage", STD, ["garage_estimate"], (-0.7, 0.6),
             "That visit to the garage."),
            ("q_sorted", MA, ["cheap_car_found"], (0.55, 0.6),
             "When did my car troubles start getting sorted?"),
        ],
    },
    {
        "id": "money_investments",
        "topic": "money",
        "arc": "joy -> worry -> calm",
        "description": "First investments, a market drop, and learning to stay calm.",
        "sessions": [
            ("Gains", [
                ("first_shares_bought", "pride", 0.6, 0.5,
                 "Bought my first index fund shares with savings from the summer job, "
                 "feeling very grown up."),
                ("portfolio_up", "peak", 0.85, 0.75,
                 "Checked the app and my portfolio was up twelve percent; I showed everyone "
                 "at dinner."),
                ("finance_book", "calm", 0.3, 0.2,
                 "Read a calm finance book about long-term investing on a rainy Sunday "
                 "afternoon."),
            ]),
            ("The drop", [
                ("market_dip_news", "turning point", -0.35, 0.6,
                 "Headlines about a market dip appeared and my portfolio slipped for the "
                 "first time; I felt uneasy."),
                ("portfolio_crash", "low", -0.8, 0.85,
                 "The portfolio fell twenty percent in a week and I lay awake calculating "
                 "losses."),
                ("stayed_invested", "acceptance", 0.3, 0.25,
                 "Decided to stay invested and deleted the app from my phone, which brought "
                 "an odd calm."),
            ]),
        ],
        "queries": [
            ("q_most_thrilled", AA, ["portfolio_up"], (0.8, 0.75),
             "When was I most thrilled about my investments?"),
            ("q_going_sour", MA, ["market_dip_news"], (-0.3, 0.6),
             "When did my investing start to go sour?"),
            ("q_stop_checking", SC, ["stayed_invested"], (0.3, 0.25),
             "When did I stop obsessively checking how my money was doing?"),
        ],
    },
    # --------------------------------------------------------------- hobbies
    {
        "id": "hobby_pottery",
        "topic": "hobbies",
        "arc": "frustration -> mastery",
        "description": "Learning to throw pots at a community centre.",
        "sessions": [
            ("Learning the wheel", [
                ("first_pottery_class", "chaos", -0.2, 0.7,
                 "First pottery class at the community centre; my clay flew off the wheel "
                 "and hit the teacher's apron."),
                ("first_bowl_collapse", "frustration", -0.6, 0.6,
                 "My first bowl on the wheel collapsed into a wobbly heap and I almost gave "
                 "up."),
                ("glaze_workshop", "calm", 0.5, 0.2,
                 "Spent a quiet glaze workshop mixing blues and greens, listening to the "
                 "rain on the skylight."),
            ]),
            ("Getting it", [
                ("second_bowl", "pride", 0.8, 0.7,
                 "My second bowl on the wheel stood up straight, thin-walled and even, and "
                 "the teacher clapped."),
                ("kiln_crack", "disappointment", -0.3, 0.4,
                 "Opened the kiln to find my favourite mug cracked down the side; "
                 "disappointing but not tragic."),
                ("gift_to_mum", "warmth", 0.8, 0.5,
                 "Gave mum a glazed bowl for her birthday and she put it straight on the "
                 "mantelpiece."),
            ]),
        ],
        "queries": [
            ("q_earlier_bowl", RC, ["first_bowl_collapse"], (-0.55, 0.6),
             "How did throwing a bowl go before I got the hang of the wheel?"),
            ("q_wheel", STD, ["first_pottery_class"], (-0.2, 0.7),
             "That moment at the pottery wheel."),
        ],
    },
    {
        "id": "hobby_band_gig",
        "topic": "hobbies",
        "arc": "nerves -> triumph -> comedown",
        "description": "An office band plays its first real gig.",
        "sessions": [
            ("Rehearsals", [
                ("band_formed", "fun", 0.7, 0.6,
                 "Formed a band with three coworkers; we called ourselves The Late Invoices "
                 "and laughed for an hour."),
                ("rehearsal_argument", "conflict", -0.6, 0.7,
                 "Rehearsal ended in an argument about the setlist and our drummer stormed "
                 "out."),
                ("gig_booked", "excitement", 0.6, 0.7,
                 "The pub down the road booked us for a Friday gig, our first ever real "
                 "show."),
            ]),
            ("The gig", [
                ("sound_check_fail", "dread", -0.6, 0.8,
                 "At sound check the amp kept cutting out and I was sure the gig would be a "
                 "disaster."),
                ("crowd_singing", "peak", 0.95, 0.95,
                 "By the last song the whole pub was singing the chorus back to us; pure "
                 "electricity."),
                ("quiet_pack_up", "comedown", -0.15, 0.3,
                 "Packed up the gear at one in the morning, ears ringing, feeling flat once "
                 "it was all over."),
            ]),
        ],
        "queries": [
            ("q_electrifying", AA, ["crowd_singing"], (0.9, 0.9),
             "What was the most electrifying moment with the band?"),
            ("q_gear_trouble", SC, ["sound_check_fail"], (-0.55, 0.8),
             "When did the gear threaten to ruin the show?"),
            ("q_comedown", MA, ["quiet_pack_up"], (-0.15, 0.3),
             "When did the buzz start wearing off?"),
        ],
    },
    {
        "id": "hobby_vegetable_garden",
        "topic": "hobbies",
        "arc": "hope -> loss -> harvest",
        "description": "A first season growing vegetables, slugs included.",
        "sessions": [
            ("Spring", [
                ("seeds_planted", "hope", 0.6, 0.45,
                 "Planted tomato and bean seeds in trays on the windowsill, full of hope for "
                 "summer salads."),
                ("slugs_first_attack", "anger", -0.7, 0.75,
                 "Slugs ate half my seedlings overnight; I stood in the garden in my "
                 "dressing gown, furious."),
                ("allotment_neighbour", "kindness", 0.5, 0.35,
                 "The allotment neighbour gave me tips on copper tape and a bag of his spare "
                 "compost."),
            ]),
            ("Summer", [
                ("slugs_second_attack", "acceptance", -0.2, 0.3,
                 "Slugs got into the lettuces again, but this time I just shrugged and "
                 "replanted."),
                ("first_tomato", "peak", 0.85, 0.65,
                 "Picked the first ripe tomato of the summer and ate it warm straight off "
                 "the vine, delighted."),
                ("heatwave_watering", "contentment", 0.3, 0.4,
                 "Watered the garden at dawn during the heatwave, sweaty and tired but oddly "
                 "content."),
            ]),
        ],
        "queries": [
            ("q_earlier_slugs", RC, ["slugs_first_attack"], (-0.65, 0.75),
             "What happened with the slugs before I learned to shrug it off?"),
            ("q_tomatoes", STD, ["seeds_planted"], (0.55, 0.4),
             "What do I remember about my tomatoes?"),
            ("q_most_delightful", AA, ["first_tomato"], (0.85, 0.65),
             "What was the most delightful moment in the garden this year?"),
        ],
    },
]


def _jitter(rng: random.Random, value: float, lo: float, hi: float) -> float:
    """``value`` plus a small seeded perturbation, clipped to ``[lo, hi]``, 2 decimals."""
    noisy = value + rng.uniform(-JITTER, JITTER)
    return round(min(hi, max(lo, noisy)), 2)


def _check_scenario(spec: dict[str, Any]) -> None:
    """Raise ValueError when a hand-written scenario breaks the dataset rules."""
    sid = spec["id"]
    seen: set[str] = set()
    for _, events in spec["sessions"]:
        for mid, _, _, _, text in events:
            if mid in seen:
                raise ValueError(f"{sid}: duplicate memory id {mid!r}")
            seen.add(mid)
            n = len(text.split())
            if not MIN_WORDS <= n <= MAX_WORDS:
                raise ValueError(f"{sid}/{mid}: {n} words, want {MIN_WORDS}-{MAX_WORDS}")
    qids = [q[0] for q in spec["queries"]]
    if len(set(qids)) != len(qids):
        raise ValueError(f"{sid}: duplicate query id")
    if not 1 <= len(qids) <= 3:
        raise ValueError(f"{sid}: want 1-3 queries, got {len(qids)}")
    for qid, ctype, expected, _, _ in spec["queries"]:
        if ctype not in CHALLENGE_TYPES:
            raise ValueError(f"{sid}/{qid}: unknown challenge type {ctype!r}")
        missing = [e for e in expected if e not in seen]
        if missing:
            raise ValueError(f"{sid}/{qid}: unknown expected ids {missing}")


def build(seed: int = SEED) -> dict[str, Any]:
    """Build the dataset dict (deterministic for a given ``seed``)."""
    rng = random.Random(seed)
    scenarios: list[dict[str, Any]] = []
    for spec in SCENARIOS:
        _check_scenario(spec)
        sessions: list[dict[str, Any]] = []
        n_sessions = len(spec["sessions"])
        for index, (description, events) in enumerate(spec["sessions"], start=1):
            session: dict[str, Any] = {
                "session_id": f"{spec['id']}_s{index}",
                "description": description,
                "events": [
                    {
                        "memory_id": mid,
                        "content": text,
                        "valence": _jitter(rng, valence, -1.0, 1.0),
                        "arousal": _jitter(rng, arousal, 0.0, 1.0),
                        "metadata": {"topic": spec["topic"], "phase": phase},
                    }
                    for mid, phase, valence, arousal, text in events
                ],
                "queries": [],
            }
            if index == n_sessions:
                session["queries"] = [
                    {
                        "query_id": qid,
                        "query": text,
                        "expected_memory_ids": list(expected),
                        "challenge_type": ctype,
                        "state": {
                            "valence": _jitter(rng, state[0], -1.0, 1.0),
                            "arousal": _jitter(rng, state[1], 0.0, 1.0),
                        },
                    }
                    for qid, ctype, expected, state, text in spec["queries"]
                ]
            sessions.append(session)
        scenarios.append(
            {
                "scenario_id": spec["id"],
                "description": f"{spec['description']} Arc: {spec['arc']}.",
                "sessions": sessions,
            }
        )
    n_queries = sum(len(spec["queries"]) for spec in SCENARIOS)
    return {
        "name": "builtin_recall",
        "version": "1.0",
        "description": (
            f"Small labelled recall dataset written for emotional_memory: {len(scenarios)} "
            "everyday-life scenarios (two sessions of three events each) with preset "
            f"valence/arousal and {n_queries} queries across five challenge types; "
            "generated by training/make_builtin_dataset.py"
        ),
        "default_top_k": DEFAULT_TOP_K,
        "scenarios": scenarios,
    }


def dumps(data: dict[str, Any]) -> str:
    """The canonical file text of ``data`` (2-space indent, trailing newline)."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def stats(data: dict[str, Any]) -> dict[str, Any]:
    """Counts of scenarios, sessions, events and queries (by challenge type)."""
    sessions = [s for sc in data["scenarios"] for s in sc["sessions"]]
    queries = [q for s in sessions for q in s["queries"]]
    by_type: dict[str, int] = {}
    for q in queries:
        by_type[q["challenge_type"]] = by_type.get(q["challenge_type"], 0) + 1
    return {
        "scenarios": len(data["scenarios"]),
        "sessions": len(sessions),
        "events": sum(len(s["events"]) for s in sessions),
        "queries": len(queries),
        "by_challenge": dict(sorted(by_type.items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the dataset file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="JSON file to write")
    parser.add_argument("--seed", type=int, default=SEED, help="jitter seed")
    parser.add_argument(
        "--check", action="store_true", help="only verify that the file is up to date"
    )
    args = parser.parse_args(argv)
    data = build(args.seed)
    text = dumps(data)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale; rerun training/make_builtin_dataset.py")
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {json.dumps(stats(data))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
